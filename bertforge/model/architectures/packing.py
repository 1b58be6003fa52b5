"""The model's fast path, behind one `Layout` object per forward pass that every layer reads.

`Packing` maps between a padded batch [B, L, ...] and its real tokens [T, ...], so every layer except the
attention product skips the padding. Its gather and scatter are small autograd functions, each the other's
gradient, so neither direction clones zeros or scatter-adds. `DropoutNoise` draws each dropout site's keep
mask as the site (`DropoutSite`, a module of the model) asks for it, one byte an element. `Layout` holds both,
and splits and merges attention heads for either layout.
"""

import collections
from dataclasses import dataclass

import torch
from torch import nn


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
        index = ctx.saved_tensors  # read once: gradient checkpointing allows one unpacking
        return (grad.permute(ctx.perm)[index], None, None) + (None,) * len(index)


class _GatherRows(torch.autograd.Function):
    """x.permute(perm)[index], the indexed positions distinct. Its gradient is the matching scatter into zeros."""

    @staticmethod
    def forward(ctx, x, perm, *index):
        ctx.save_for_backward(*index)
        ctx.perm, ctx.shape = perm, x.shape
        return x.permute(perm)[index]

    @staticmethod
    def backward(ctx, grad):
        index = ctx.saved_tensors
        out = grad.new_zeros(ctx.shape)
        out.permute(ctx.perm)[index] = grad
        return (out, None) + (None,) * len(index)


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


@dataclass
class Keep:
    """One site's dropout: the elements kept (bool) and the scale 1/(1-p) they are multiplied by."""

    mask: torch.Tensor
    scale: float

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.mask).mul_(self.scale)

    def add(self, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """residual + dropout(x), in one fused operation."""
        return torch.addcmul(residual, x, self.mask, value=self.scale)


class DropoutNoise:
    """The keep masks of one forward pass, each drawn when its site asks for it, just before it is applied:
    each element kept with probability 1 - p, independently, as nn.Dropout does. A mask is bool, which
    autograd keeps for the backward pass at a quarter of a float's size, and no layer's mask exists before the
    layer runs: under gradient checkpointing only the running layer's are held (the checkpoint restores the
    random state, so a replayed layer draws the same masks).

    The sites are counted where they are: the model's `DropoutSite` modules. A pass that asks for more masks
    than there are sites fails at once, and `check_used` fails a pass that took fewer.
    """

    def __init__(self, sites: dict[str, int], shapes: dict[str, tuple], p: dict[str, float], device):
        self.sites = {kind: sites.get(kind, 0) if p[kind] > 0 else 0 for kind in shapes}
        self.shapes, self.p, self.device = shapes, p, device
        self.taken = dict.fromkeys(shapes, 0)

    @classmethod
    def of(cls, model: nn.Module, token_shape, batch: int, length: int, device) -> "DropoutNoise | None":
        """A pass's dropout for `model`, one keep mask per DropoutSite module in it (hidden masks of
        `token_shape` + [H]); None in eval or without dropout."""
        c = model.config
        if not model.training or (c.hidden_dropout_prob <= 0 and c.attention_probs_dropout_prob <= 0):
            return None
        sites = collections.Counter(m.kind for m in model.modules() if isinstance(m, DropoutSite))
        shapes = {"hidden": (*token_shape, c.hidden_size), "attention": (batch * c.num_attention_heads, length, length)}
        p = {"hidden": c.hidden_dropout_prob, "attention": c.attention_probs_dropout_prob}
        return cls(sites, shapes, p, device)

    def take(self, kind: str) -> Keep | None:
        if not self.sites[kind]:
            return None
        if self.taken[kind] == self.sites[kind]:
            raise RuntimeError(f"more {kind} dropout sites took a mask than the model declares ({self.sites[kind]})")
        self.taken[kind] += 1
        p = min(self.p[kind], 1.0)
        mask = torch.empty(self.shapes[kind], dtype=torch.bool, device=self.device).bernoulli_(1 - p)
        return Keep(mask, 1 / (1 - p) if p < 1 else 1.0)

    def check_used(self):
        for kind, sites in self.sites.items():
            if self.taken[kind] != sites:
                raise RuntimeError(f"{self.taken[kind]} of {sites} {kind} dropout sites took a mask")


@dataclass
class Layout:
    """One forward pass's execution plan, read by every layer: the tokens padded [B, L, H] or packed [T, H]
    (`packing`), and the pass's dropout masks (`noise`, None in eval or without dropout)."""

    batch: int
    length: int
    packing: Packing | None
    noise: DropoutNoise | None
    attentions: list | None = None  # with output_attentions: each layer's probabilities, [B, heads, L, L]
    causal: bool = False  # each position attends to itself and its left only (config.is_decoder)
    device: torch.device = torch.device("cpu")
    padding: torch.Tensor | None = None  # [B, L] True on real tokens, on the padded path (ONNX export)

    def dropout(self, kind: str) -> Keep | None:
        return self.noise.take(kind) if self.noise is not None else None

    def record_attention(self, probs: torch.Tensor, heads: int):
        """Keep a layer's attention probabilities [B * heads, L, L] when asked; padded query rows as zeros."""
        if self.attentions is not None:
            probs = probs.view(self.batch, heads, self.length, self.length)
            if self.packing is not None:
                probs = probs * self.packing.key_mask.transpose(-1, -2)
            self.attentions.append(probs)

    def replaying(self, layer):
        """`layer` as a function of x that takes the same dropout masks each time it runs: gradient checkpointing
        runs it again in the backward pass."""
        start = dict(self.noise.taken) if self.noise is not None else None

        def run(x):
            if start is not None:
                self.noise.taken = dict(start)
            return layer(x, self)
        return run

    def split_heads(self, qkv: torch.Tensor, heads: int) -> tuple[torch.Tensor, ...]:
        """Q, K, V, each [B, heads, L, head_size] (zeros at the padding), from the [.., 3 H] projections."""
        if self.packing is not None:
            q, k, v = self.packing.unpack_heads(qkv, heads)
            return tuple(t.view(self.batch, heads, self.length, -1) for t in (q, k, v))
        return qkv.view(self.batch, self.length, 3, heads, -1).permute(2, 0, 3, 1, 4).unbind(0)

    @property
    def key_mask(self) -> torch.Tensor | None:
        """True where a query may attend to a key: [B, 1, 1, L] for padding, [.., L, L] when causal; None when
        every key may be attended to."""
        mask = self.packing.key_mask if self.packing is not None else None
        if self.padding is not None:
            mask = self.padding[:, None, None, :]
        if self.causal:
            left = torch.ones(self.length, self.length, dtype=torch.bool, device=self.device).tril()
            mask = left if mask is None else mask & left
        return mask

    def key_bias(self, heads: int, like: torch.Tensor) -> torch.Tensor:
        """An additive mask for the [B * heads, L, L] scores: 0 where a key may be attended to, the lowest value
        for padding keys (and, when causal, keys to the right)."""
        if self.packing is not None:
            bias = self.packing.key_bias(heads, like.dtype)
        elif self.padding is not None:
            bias = like.new_zeros(self.batch, 1, 1, self.length).masked_fill(~self.padding[:, None, None, :],
                                                                             torch.finfo(like.dtype).min)
            bias = bias.expand(-1, heads, -1, -1).reshape(self.batch * heads, 1, self.length)
        else:
            bias = like.new_zeros(1, 1, 1)
        return bias + causal_bias(self.length, like) if self.causal else bias

    def merge_heads(self, context: torch.Tensor) -> torch.Tensor:
        """Attention output [B, heads, L, head_size] (any strides) -> [T, H] packed or [B, L, H]."""
        if self.packing is not None:
            return self.packing.pack_heads(context)
        return context.transpose(1, 2).reshape(self.batch, self.length, -1)


class DropoutSite(nn.Module):
    """A place where dropout applies: its keep mask for this pass comes from the layout (None: keep all).
    The sites are counted from these modules, so that each pass draws exactly one mask per site."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind  # "hidden" ([tokens, H] masks) or "attention" ([B * heads, L, L] masks)

    def forward(self, layout: Layout) -> Keep | None:
        return layout.dropout(self.kind)


@dataclass
class EncoderOutput:
    """The last hidden states, packed [T, H] (with `packing`) or [B, L, H], the unpacked hidden_states and the
    attention probabilities (when asked)."""

    x: torch.Tensor
    packing: Packing | None
    batch: int
    length: int
    hidden_states: tuple | None
    attentions: tuple | None = None
    causal: bool = False  # a left-to-right model (config.is_decoder): see pooled_tokens
    padding: torch.Tensor | None = None  # [B, L] True on real tokens, on the padded path (ONNX export)

    def sequence(self) -> torch.Tensor:
        """[B, L, H], zeros at the padding."""
        return self.packing.unpack(self.x) if self.packing is not None else self.x

    def rows(self, flat_positions: torch.Tensor) -> torch.Tensor:
        """The vectors at these positions of the flattened [B * L] (distinct, in the given order)."""
        if self.packing is None:
            return gather_rows(self.x.flatten(0, 1), flat_positions)
        index = self.packing.packed_index(flat_positions)
        if index is None:  # a position in the padding: its vector is the zeros of the unpacked sequence
            return gather_rows(self.sequence().flatten(0, 1), flat_positions)
        return gather_rows(self.x, index)

    def pooled_tokens(self) -> torch.Tensor:
        """[B, H]: the vector of each row that the pooler reads: the first ([CLS]); in a left-to-right model
        (causal), the last real token, the one position that has seen the whole input."""
        device = self.x.device
        last = torch.zeros(self.batch, dtype=torch.long, device=device)
        if self.causal and self.padding is not None:
            last = (self.padding.long() * torch.arange(self.length, device=device)).amax(1)
        elif self.causal and self.packing is None:
            last += self.length - 1
        elif self.causal:
            last.scatter_reduce_(0, self.packing.rows, self.packing.cols, "amax")
        if self.packing is None:
            return self.x[torch.arange(self.batch, device=device), last]
        return self.rows(torch.arange(self.batch, device=device) * self.length + last)
