"""BERT's initialisation, as Google's code draws it: weights from a normal distribution cut at 2 std, zero biases,
LayerNorm 1/0. Every family built on bert.py's base starts from it (their own rows on top: DistilBERT's padding
row and sinusoids, MPNet's padding rows); ModernBERT draws its own (modernbert.py)."""

import math

import torch
from torch import nn


def truncated_normal_(weight: torch.Tensor, std: float) -> torch.Tensor:
    """Normal(0, std) cut at 2 std, by inverting the CDF: one pass, where torch's rejection sampler takes ten
    times as long (seconds per table at Base size)."""
    bound = math.erf(2 / math.sqrt(2))  # the normal CDF at +-2 std, as erf
    with torch.no_grad():
        # through nn.init, so that sizes.no_random_init can switch it off
        return nn.init.uniform_(weight, -bound, bound).erfinv_().mul_(std * math.sqrt(2)).clamp_(-2 * std, 2 * std)


def init_bert_weights(modules, std: float) -> None:
    """Truncated normal (std: config.initializer_range, 0.02; cut at 2 std as Google's code) for the weights of
    Linear and Embedding `modules`, zero biases, LayerNorm 1/0."""
    for module in modules:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            truncated_normal_(module.weight, std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
