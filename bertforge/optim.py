"""BERT's optimiser: Adam with decoupled weight decay (not on biases or LayerNorm), warm-up then linear decay."""

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on matrices only: biases, LayerNorm parameters and the MLM output bias are exempt."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim < 2 or "LayerNorm" in name else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class GoogleAdamW(torch.optim.Optimizer):
    """Google's AdamWeightDecayOptimizer: Adam without bias correction, decay added to the update.

    update = m / (sqrt(v) + eps) + weight_decay * p;  p -= lr * update
    """

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            for p in params:
                if not self.state[p]:
                    self.state[p] = {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            grads = [p.grad for p in params]
            m = [self.state[p]["exp_avg"] for p in params]
            v = [self.state[p]["exp_avg_sq"] for p in params]
            beta1, beta2 = group["betas"]
            torch._foreach_lerp_(m, grads, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            update = torch._foreach_div(m, torch._foreach_add(torch._foreach_sqrt(v), group["eps"]))
            if group["weight_decay"]:
                torch._foreach_add_(update, params, alpha=group["weight_decay"])
            torch._foreach_add_(params, update, alpha=-group["lr"])


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.01, eps: float = 1e-6,
                   betas=(0.9, 0.999), bias_correction: bool = True) -> torch.optim.Optimizer:
    groups = param_groups(model, weight_decay)
    if not bias_correction:
        return GoogleAdamW(groups, lr=lr, betas=betas, eps=eps)
    fused = all(p.device.type in ("cpu", "cuda") for g in groups for p in g["params"])
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=fused)


def linear_schedule(optimizer, warmup_steps: int, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up from 0 over `warmup_steps`, then linear decay to 0 at `total_steps`.

    The first update has rate 0, as in Google's code and transformers; the decay starts from the full rate at
    the end of the warm-up, as transformers (Google's decays from step 0, with a drop when warm-up ends).
    """

    def factor(step):
        if step < warmup_steps:
            return step / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
