"""Padding-free execution: a padded batch's real tokens packed into one matrix, and dropout drawn per pass.

`Packing` maps between a padded batch [B, L, ...] and its real tokens [T, ...], so no layer computes on
padding: attention runs per group of rows with the same number of real tokens. Its gather and scatter are
small autograd functions, each the other's gradient, so neither direction clones zeros or scatter-adds.
`DropoutNoise` draws the keep masks of a whole forward pass at once (uniform draws compared with p,
pre-scaled by 1/(1-p)): one draw per kind of site instead of one per layer.
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
    """Maps between a padded batch [B, L, ...] and its real tokens packed as [T, ...].

    The packed rows come grouped by their number of real tokens, so attention runs on each group of
    equal-length rows as a dense block with no padding and no mask (`split`): a row attends to its real
    tokens only, wherever they sit in the padded row.
    """

    indices: torch.Tensor  # [T] positions of the real tokens in the flattened [B * L], grouped as above
    batch: int
    length: int
    groups: list[tuple[int, int]]  # (rows, real tokens per row) of each group, in packed order

    @classmethod
    def from_attention_mask(cls, attention_mask: torch.Tensor) -> "Packing | None":
        """None when nothing is padded: then the plain [B, L, H] path is fastest."""
        mask = attention_mask.bool()
        if bool(mask.all()):
            return None
        batch, length = mask.shape
        lengths = mask.sum(1)
        order = torch.argsort(lengths, stable=True)
        sorted_row, col = mask[order].nonzero().unbind(1)
        indices = order[sorted_row] * length + col
        sizes, counts = torch.unique_consecutive(lengths[order], return_counts=True)
        groups = [(n, size) for size, n in zip(sizes.tolist(), counts.tolist()) if size > 0]
        return cls(indices, batch, length, groups)

    def __post_init__(self):
        self.rows = torch.div(self.indices, self.length, rounding_mode="floor")  # [T] row of each real token
        self.cols = self.indices - self.rows * self.length  # [T] its position in the row

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, L, ...] -> [T, ...]"""
        return _GatherRows.apply(x, tuple(range(x.dim())), self.rows, self.cols)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[T, ...] -> [B, L, ...], zeros at the padding."""
        shape = (self.batch, self.length, *x.shape[1:])
        return _ScatterRows.apply(x, shape, tuple(range(len(shape))), self.rows, self.cols)

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Packed [T, ...] -> one [rows, tokens, ...] view per group of equal-length rows."""
        out, start = [], 0
        for rows, tokens in self.groups:
            out.append(x[start:start + rows * tokens].view(rows, tokens, *x.shape[1:]))
            start += rows * tokens
        return out

    def attention_cells(self, heads: int) -> int:
        """Entries of all the groups' attention matrices [rows * heads, tokens, tokens] together."""
        return heads * sum(rows * tokens * tokens for rows, tokens in self.groups)

    def packed_index(self, flat_positions: torch.Tensor) -> torch.Tensor | None:
        """Rows of the packed matrix holding these positions of the flattened [B * L]; None if any is padding."""
        where = torch.full((self.batch * self.length,), -1, dtype=torch.long, device=self.indices.device)
        where[self.indices] = torch.arange(len(self.indices), device=self.indices.device)
        index = where[flat_positions]
        return None if bool((index < 0).any()) else index


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
