"""Padding-free execution: a padded batch's real tokens packed into one matrix, and dropout drawn per pass.

`Packing` maps between a padded batch [B, L, ...] and its real tokens [T, ...], so every layer except the
attention product skips the padding. Its gather and scatter are small autograd functions, each the other's
gradient, so neither direction clones zeros or scatter-adds. `DropoutNoise` draws the keep masks of a whole
forward pass at once (uniform draws compared with p, pre-scaled by 1/(1-p)): one draw per kind of site
instead of one per layer.
"""

from dataclasses import dataclass

import torch


class _ScatterRows(torch.autograd.Function):
    """out = zeros(shape); out.permute(perm)[index] = src. Its gradient is the matching gather.

    Unlike index_copy/index_put under autograd, neither direction clones the zeros or scatter-adds.
    """

    @staticmethod
    def forward(ctx, src, shape, perm, *index):
        ctx.save_for_backward(*index)
        ctx.perm = perm
        out = src.new_zeros(shape)
        out.permute(perm)[index] = src
        return out

    @staticmethod
    def backward(ctx, grad):
        return (grad.permute(ctx.perm)[ctx.saved_tensors], None, None) + (None,) * len(ctx.saved_tensors)


class _GatherRows(torch.autograd.Function):
    """x.permute(perm)[index], the indexed positions distinct. Its gradient is the matching scatter into zeros."""

    @staticmethod
    def forward(ctx, x, perm, *index):
        ctx.save_for_backward(*index)
        ctx.perm, ctx.shape = perm, x.shape
        return x.permute(perm)[index]

    @staticmethod
    def backward(ctx, grad):
        out = grad.new_zeros(ctx.shape)
        out.permute(ctx.perm)[ctx.saved_tensors] = grad
        return (out, None) + (None,) * len(ctx.saved_tensors)


def gather_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """x[index] along the first axis, for distinct indices (the gradient is copied back, not scatter-added)."""
    return _GatherRows.apply(x, tuple(range(x.dim())), index)


@dataclass
class Packing:
    """Maps between a padded batch [B, L, ...] and its real tokens packed as [T, ...]."""

    indices: torch.Tensor  # [T] positions of the real tokens in the flattened [B * L]
    batch: int
    length: int
    key_mask: torch.Tensor  # [B, 1, 1, L], True where a key may be attended to

    @classmethod
    def from_attention_mask(cls, attention_mask: torch.Tensor) -> "Packing | None":
        """None when nothing is padded: then the plain [B, L, H] path is fastest."""
        mask = attention_mask.bool()
        if bool(mask.all()):
            return None
        batch, length = mask.shape
        indices = mask.flatten().nonzero().squeeze(1)
        return cls(indices, batch, length, mask[:, None, None, :])

    def __post_init__(self):
        self.rows = torch.div(self.indices, self.length, rounding_mode="floor")  # [T] row of each real token
        self.cols = self.indices - self.rows * self.length  # [T] its position in the row
        self._bias, self._buffers = {}, {}

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, ...] -> [T, ...]"""
        return _GatherRows.apply(x, tuple(range(x.dim())), self.rows, self.cols)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[T, ...] -> [B, L, ...], zeros at the padding."""
        shape = (self.batch, self.length, *x.shape[1:])
        return _ScatterRows.apply(x, shape, tuple(range(len(shape))), self.rows, self.cols)

    def unpack_heads(self, qkv: torch.Tensor, heads: int) -> torch.Tensor:
        """Packed [T, 3 H] projections -> [3, B * heads, L, head_size], zeros at the padding (no copies after).

        Without autograd, every layer writes into one zeroed buffer (its padding stays zero), not a new one.
        """
        size = qkv.shape[1] // (3 * heads)
        shape, perm = (3, self.batch, heads, self.length, size), (1, 3, 0, 2, 4)
        if torch.is_grad_enabled():
            out = _ScatterRows.apply(qkv.view(-1, 3, heads, size), shape, perm, self.rows, self.cols)
        else:
            out = self._buffers.get((shape, qkv.dtype))
            if out is None:
                out = self._buffers[shape, qkv.dtype] = qkv.new_zeros(shape)
            out.permute(perm)[self.rows, self.cols] = qkv.view(-1, 3, heads, size)
        return out.view(3, self.batch * heads, self.length, size)

    def pack_heads(self, context: torch.Tensor) -> torch.Tensor:
        """Attention output [B, heads, L, head_size] (any strides) -> packed [T, H]."""
        return _GatherRows.apply(context, (0, 2, 1, 3), self.rows, self.cols).flatten(1)

    def key_bias(self, heads: int, dtype: torch.dtype) -> torch.Tensor:
        """[B * heads, 1, L] additive mask: 0 for real keys, the dtype's lowest value for padding."""
        if (heads, dtype) not in self._bias:
            bias = torch.zeros(self.key_mask.shape, dtype=dtype, device=self.indices.device)
            bias.masked_fill_(~self.key_mask, torch.finfo(dtype).min)
            self._bias[heads, dtype] = bias.expand(-1, heads, -1, -1).reshape(self.batch * heads, 1, self.length)
        return self._bias[heads, dtype]

    def packed_index(self, flat_positions: torch.Tensor) -> torch.Tensor | None:
        """Rows of the packed matrix holding these positions of the flattened [B * L]; None if any is padding."""
        real = torch.zeros(self.batch * self.length, dtype=torch.bool, device=self.indices.device)
        real[self.indices] = True
        if not bool(real[flat_positions].all()):
            return None
        return torch.cumsum(real, 0)[flat_positions] - 1


def causal_bias(length: int, like: torch.Tensor) -> torch.Tensor:
    """[L, L] additive mask: 0 on and below the diagonal, the lowest value above (keys to the right)."""
    bias = torch.full((length, length), torch.finfo(like.dtype).min, dtype=like.dtype, device=like.device)
    return bias.triu_(1)


class DropoutNoise:
    """Pre-scaled keep masks (0 or 1/(1-p)) for every dropout site of one forward pass, drawn in one call each
    for the hidden sites and the attention sites: a site's mask is a slice, applied with one multiply.

    Each element is kept with probability 1 - p, independently, as nn.Dropout does.
    """

    def __init__(self, hidden_shape, hidden_sites: int, hidden_p: float, attention_shape, attention_sites: int,
                 attention_p: float, device):
        self.hidden = self.draw(hidden_sites, hidden_shape, hidden_p, device)
        self.attention = self.draw(attention_sites, attention_shape, attention_p, device)
        self.next_hidden = self.next_attention = 0

    @staticmethod
    def draw(sites, shape, p, device):
        if not sites or p <= 0:
            return None
        if p >= 1:
            return torch.zeros(sites, *shape, device=device)
        return torch.rand(sites, *shape, device=device).ge_(p).mul_(1 / (1 - p))

    def take_hidden(self):
        if self.hidden is None:
            return None
        self.next_hidden += 1
        return self.hidden[self.next_hidden - 1]

    def take_attention(self):
        if self.attention is None:
            return None
        self.next_attention += 1
        return self.attention[self.next_attention - 1]
