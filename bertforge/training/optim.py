"""BERT's optimiser: Adam with decoupled weight decay (not on biases or LayerNorm), warm-up then linear decay."""

import math

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


# ---------------------------------------------------------------------------------------------------------
# Schedules as a function of progress in [0, 1], by steps or by training time

SCHEDULES = ("linear", "one-cycle")
ONE_CYCLE_START = 1 / 25  # the one-cycle rate starts at peak / 25, as torch's OneCycleLR


def schedule_factor(shape: str, progress: float, warmup: float) -> float:
    """The rate over its peak at `progress` (0: start, 1: end, always 0 there) with a warm-up of that fraction.

    linear: from 0 up to the peak over the warm-up, then straight down to 0 (the paper's, BERT's code).
    one-cycle: from peak / 25 up to the peak over the warm-up, then down to 0, both along half cosines
    (Smith's 1cycle as torch's OneCycleLR, annealed to exactly 0).
    """
    p = min(max(progress, 0.0), 1.0)
    if shape == "linear":
        return p / warmup if p < warmup else (1 - p) / max(1 - warmup, 1e-12)
    if shape == "one-cycle":
        if p < warmup:
            return ONE_CYCLE_START + (1 - ONE_CYCLE_START) * (1 - math.cos(math.pi * p / warmup)) / 2
        return (1 + math.cos(math.pi * (p - warmup) / max(1 - warmup, 1e-12))) / 2
    raise ValueError(f"unknown schedule {shape!r}: choose one of {', '.join(SCHEDULES)}")


def step_schedule(optimizer, shape: str, warmup_steps: int, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """A schedule over steps: `linear_schedule` for linear, else `schedule_factor` of step / total_steps."""
    if shape == "linear":
        return linear_schedule(optimizer, warmup_steps, total_steps)
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: schedule_factor(shape, step / total_steps, warmup_steps / total_steps))


class TimeSchedule:
    """The rate as a function of training seconds spent over a time budget, so that it reaches 0 exactly when
    the budget is spent. `step(seconds)` adds a step's training time; the state (steps, seconds) is saved in
    checkpoints like a torch scheduler's, so a resumed run continues the same schedule and budget."""

    def __init__(self, optimizer, shape: str, warmup: float, budget_s: float):
        self.optimizer, self.shape, self.warmup, self.budget_s = optimizer, shape, warmup, budget_s
        self.peaks = [g["lr"] for g in optimizer.param_groups]
        self.steps, self.seconds = 0, 0.0
        self._apply()

    @property
    def progress(self) -> float:
        return self.seconds / self.budget_s

    @property
    def finished(self) -> bool:
        return self.seconds >= self.budget_s

    def step(self, seconds: float = 0.0):
        self.steps += 1
        self.seconds += seconds
        self._apply()

    def _apply(self):
        factor = schedule_factor(self.shape, self.progress, self.warmup)
        for group, peak in zip(self.optimizer.param_groups, self.peaks):
            group["lr"] = peak * factor

    def get_last_lr(self) -> list[float]:
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        return {"steps": self.steps, "seconds": self.seconds}

    def load_state_dict(self, state: dict):
        self.steps, self.seconds = state["steps"], state["seconds"]
        self._apply()
