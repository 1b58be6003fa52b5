"""ModernBERT (Warner et al., 2024), top to bottom, and its masked-LM head; the Ettin encoders share this layout.
Its task heads are modernbert_task_heads.py's (importable from here too).

What differs from BERT (bert.py): no position or token-type tables, rotary positions instead (RoPE, a base per
layer type); pre-LayerNorm layers, without biases by default, the first layer reading the embeddings' norm
directly; a gated feed-forward (GeGLU: act(x W_in) * (x W_gate)); global attention in every few layers and a
sliding window elsewhere (a token sees those within local_attention // 2 of it); a final norm. Parameter names
follow transformers' layout (`model.layers.N.attn.Wqkv`, `head`, `decoder`, `classifier`).

As in bert.py, a batch with padding runs packed: every layer but the attention product works on the real tokens
alone ([T, H], packing.py), rotary positions included, and long rows the attention too, row by row; a sliding
window runs in blocks of queries against only the keys within its reach, so that its work and memory grow with
the length, not its square (global layers use the CPU's flash-attention kernel, which holds no L x L matrix).
"""

import importlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from .bert import ACT, masked_lm_loss
from ..formats.checkpoint import PretrainedMixin
from ..compat import ModelApiMixin, finish
from .modernbert_config import ModernBertConfig
from .packing import EncoderOutput, Layout, Packing

ROW_BY_ROW = 64  # from this padded length, a batch's attention runs row by row on its real tokens
LOCAL_BLOCK = 256  # queries per block of a sliding-window layer, on rows longer than this and the window


class ModernBertEmbeddings(nn.Module):
    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.drop = nn.Dropout(config.embedding_dropout)

    def forward(self, input_ids, inputs_embeds=None):
        x = self.tok_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        return self.drop(self.norm(x))


def rotary(positions: torch.Tensor, head_size: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """What turns each position's query, key and value vectors [..., 3, heads, 2, head_size / 2] (each head's
    two halves paired): cosines [..., 3, 1, 1, d / 2] and the sines signed for the halves [..., 3, 1, 2, d / 2]
    (-sin for the first, sin for the second), at the frequencies theta^(-2i/d); the values' are 1 and 0 (left
    as they are)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_size, 2, dtype=torch.float, device=positions.device) / head_size))
    angles = positions[..., None].float() * inv_freq
    cos, sin = angles.cos(), angles.sin()
    signed = torch.stack([-sin, sin], dim=-2)[..., None, :, :]
    return (torch.stack([cos, cos, torch.ones_like(cos)], dim=-2)[..., None, None, :],
            torch.stack([signed, signed, torch.zeros_like(signed)], dim=-4))


def rotate(qkv: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """The queries and keys of qkv [..., 3, heads, d] turned by each position's angles (`rotary`), each head's two
    halves paired (the reference's rotate_half: [x1 cos - x2 sin, x2 cos + x1 sin]), in float32 as the reference
    computes it; the values as they are. A product with the cosines plus one with the sines on the halves swapped,
    over the whole projection: no concatenation."""
    halves = qkv.float().unflatten(-1, (2, -1))  # [..., 3, heads, 2, d / 2]
    return torch.addcmul(halves * cos, halves.flip(-2), signed_sin).flatten(-2).to(qkv.dtype)


def band(queries: int, keys: int, offset: int, window: int, device) -> torch.Tensor:
    """[queries, keys] True where |query - key| <= window, the first query at key `offset`."""
    i = torch.arange(queries, device=device)[:, None] + offset
    return (i - torch.arange(keys, device=device)[None, :]).abs() <= window


class ModernBertAttention(nn.Module):
    """Multi-head attention with rotary positions, global or in a sliding window. A padded batch of long rows runs
    each row at its own length from the packed tokens (no work on padding); a sliding window runs in blocks of
    queries against only the keys within reach. Short rows, exported graphs and output_attentions run the padded
    batch with a mask."""

    def __init__(self, config: ModernBertConfig, layer_type: str):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.Wqkv = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=config.attention_bias)
        self.Wo = nn.Linear(config.hidden_size, config.hidden_size, bias=config.attention_bias)
        self.window = config.window if layer_type == "sliding_attention" else None
        self.dropout = config.attention_dropout
        self.out_drop = nn.Dropout(config.attention_dropout)

    def forward(self, x, layout: Layout, cos, sin):
        qkv = rotate(self.Wqkv(x).unflatten(-1, (3, self.num_heads, self.head_size)), cos, sin)  # [.., 3, heads, d]
        if layout.packing is not None and layout.length >= ROW_BY_ROW and layout.attentions is None:
            context = self.rows(qkv, layout.packing)
        else:
            context = self.padded(qkv, layout)
        return self.out_drop(self.Wo(context))

    def rows(self, qkv, packing) -> torch.Tensor:
        """Packed [T, 3, heads, d] -> packed [T, H], each row attending within itself. Split rather than sliced:
        a slice's gradient is a zero tensor of the whole batch per row, a split's one concatenation."""
        lengths = torch.bincount(packing.rows, minlength=packing.batch).tolist()
        out = []
        for row in qkv.split(lengths):
            if len(row):
                q, k, v = row.permute(1, 2, 0, 3)[:, None].unbind()  # [1, heads, n, d]: CPU flash attention
                out.append(self.attend(q, k, v, None)[0].transpose(0, 1).flatten(1))
        return torch.cat(out)

    def padded(self, qkv, layout: Layout) -> torch.Tensor:
        """Packed or padded [..., 3, heads, d] -> [..., H], the batch padded for the attention product."""
        q, k, v = layout.split_heads(qkv.flatten(-3), self.num_heads)  # [B, heads, L, d]
        if layout.attentions is not None:
            layout.attentions.append(self.probabilities(q, k, layout))
        return layout.merge_heads(self.attend(q, k, v, layout.key_mask))

    def attend(self, q, k, v, key_mask) -> torch.Tensor:
        """softmax(Q K^T / sqrt(d)) V over [..., L, d], within the window if any; `key_mask` [B, 1, 1, L] or None.
        Each query always sees itself, so that no row is empty (a padded query's row is dropped afterwards)."""
        length, device = q.shape[-2], q.device
        p = self.dropout if self.training else 0.0
        if self.window is None or length <= LOCAL_BLOCK + 2 * self.window:
            mask = key_mask
            # a row the window holds whole needs no band; an exported graph keeps it (its rows are any length)
            if self.window is not None and (length > self.window + 1 or torch.onnx.is_in_onnx_export()):
                near = band(length, length, 0, self.window, device)
                mask = near if mask is None else mask & near
            if key_mask is not None:
                mask = mask | band(length, length, 0, 0, device)  # the diagonal (no EyeLike: ONNX Runtime lacks bool)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        blocks = []
        for start in range(0, length, LOCAL_BLOCK):
            stop = min(start + LOCAL_BLOCK, length)
            first, last = max(0, start - self.window), min(length, stop + self.window)
            mask = band(stop - start, last - first, start - first, self.window, device)
            if key_mask is not None:
                mask = (mask & key_mask[..., first:last]) | band(stop - start, last - first, start - first, 0, device)
            blocks.append(F.scaled_dot_product_attention(q[..., start:stop, :], k[..., first:last, :],
                                                         v[..., first:last, :], attn_mask=mask, dropout_p=p))
        return torch.cat(blocks, dim=-2)

    def probabilities(self, q, k, layout: Layout) -> torch.Tensor:
        """output_attentions: [B, heads, L, L], zeros in padded query rows."""
        length = layout.length
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_size)
        mask = layout.key_mask
        if self.window is not None:
            near = band(length, length, 0, self.window, layout.device)
            mask = near if mask is None else mask & near
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        probs = scores.softmax(-1)
        if layout.packing is not None:
            probs = probs * layout.packing.key_mask.transpose(-1, -2)
        return probs


class ModernBertMLP(nn.Module):
    """GeGLU: Wo(act(input) * gate), input and gate the two halves of Wi's output."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.Wi = nn.Linear(config.hidden_size, 2 * config.intermediate_size, bias=config.mlp_bias)
        self.act = ACT[config.hidden_activation]
        self.drop = nn.Dropout(config.mlp_dropout)
        self.Wo = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, x):
        value, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(self.act(value) * gate))


class ModernBertEncoderLayer(nn.Module):
    """x = x + Attn(LN(x)); x = x + MLP(LN(x)). The first layer has no attention norm: the embeddings' norm is it."""

    def __init__(self, config: ModernBertConfig, index: int):
        super().__init__()
        self.attention_type = config.layer_types[index]
        self.attn_norm = nn.Identity() if index == 0 else \
            nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.attn = ModernBertAttention(config, self.attention_type)
        self.mlp_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.mlp = ModernBertMLP(config)

    def forward(self, x, layout: Layout, cos, sin):
        x = x + self.attn(self.attn_norm(x), layout, cos, sin)
        return x + self.mlp(self.mlp_norm(x))


# ---------------------------------------------------------------------------------------------------------
# The shared base: initialisation (transformers' scheme) and checkpoint loading


class ModernBertPreTrainedModel(nn.Module, PretrainedMixin, ModelApiMixin):
    base_model_prefix = "model"
    config_class = ModernBertConfig

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.config = config

    def init_weights(self):
        """Truncated normal cut at initializer_cutoff_factor std: std initializer_range for the input projections
        and the token table, scaled by 1/sqrt(2 x layers) for the output projections and the heads' dense layers,
        1/sqrt(H) for task classifiers; zero biases, norms 1/0."""
        c = self.config
        std_in, std_out = c.initializer_range, c.initializer_range / math.sqrt(2.0 * c.num_hidden_layers)

        def draw(module, std):
            cut = c.initializer_cutoff_factor * std
            nn.init.trunc_normal_(module.weight, std=std, a=-cut, b=cut)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

        for module in self.modules():
            if isinstance(module, ModernBertEmbeddings):
                draw(module.tok_embeddings, std_in)
            elif isinstance(module, (ModernBertMLP, ModernBertAttention)):
                draw(module.Wi if isinstance(module, ModernBertMLP) else module.Wqkv, std_in)
                draw(module.Wo, std_out)
            elif isinstance(module, ModernBertPredictionHead):
                draw(module.dense, std_out)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        if isinstance(self, ModernBertForMaskedLM):
            if self.decoder.weight is not None:
                draw(self.decoder, std_out)
            if self.decoder.bias is not None:
                nn.init.zeros_(self.decoder.bias)
        if hasattr(self, "classifier"):
            draw(self.classifier, c.hidden_size ** -0.5)

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.tok_embeddings


class ModernBertModel(ModernBertPreTrainedModel):
    """The encoder: last_hidden_state [B, L, H] (after the final norm) and optionally hidden_states (the embeddings'
    output and each layer's, as transformers returns them). Padding holds zeros in every returned state."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.embeddings = ModernBertEmbeddings(config)
        self.layers = nn.ModuleList(ModernBertEncoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)
        self.gradient_checkpointing = False
        self.init_weights()

    @property
    def encoder(self):
        """Where the gradient-checkpointing switch is (BERT's is on its encoder): the layers are this module's own,
        under transformers' names."""
        return self

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
                *, return_dict=True, **inputs):
        """`token_type_ids` are accepted and ignored (ModernBERT has no segments); `inputs`: output_attentions,
        output_hidden_states."""
        enc = self.encode(input_ids, attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds, **inputs)
        return finish(return_dict, last_hidden_state=enc.sequence(), hidden_states=enc.hidden_states,
                      attentions=enc.attentions)

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, *, position_ids=None,
               inputs_embeds=None, output_attentions=False, output_hidden_states=False) -> EncoderOutput:
        """The encoder's output as the heads read it: packed [T, H] when the batch has padding."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        tokens = input_ids if input_ids is not None else inputs_embeds[..., 0]
        batch, length = tokens.shape
        padded = attention_mask is not None and torch.onnx.is_in_onnx_export()
        packing = Packing.from_attention_mask(attention_mask) if attention_mask is not None and not padded else None
        if packing is not None:
            input_ids, inputs_embeds = (t.flatten(0, 1)[packing.indices] if t is not None else None
                                        for t in (input_ids, inputs_embeds))
            position_ids = packing.cols if position_ids is None else position_ids.reshape(-1)[packing.indices]
        elif position_ids is None:
            position_ids = torch.arange(length, device=tokens.device).expand(batch, length)
        layout = Layout(batch, length, packing, None, [] if output_attentions else None, False, tokens.device,
                        attention_mask.bool() if padded else None)
        x = self.embeddings(input_ids, inputs_embeds)
        angles = {kind: rotary(position_ids, self.config.hidden_size // self.config.num_attention_heads,
                               self.config.rope_theta(kind)) for kind in set(self.config.layer_types)}
        states = [x] if output_hidden_states else None
        for layer in self.layers:
            cos, sin = (t.to(x.dtype) for t in angles[layer.attention_type])
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(layer, x, layout, cos, sin, use_reentrant=False)
            else:
                x = layer(x, layout, cos, sin)
            if output_hidden_states:
                states.append(x)
        x = self.final_norm(x)
        if states:
            states[-1] = x
            if packing is not None:
                states = [packing.unpack(s) for s in states]
        return EncoderOutput(x, packing, batch, length, tuple(states) if states else None,
                             tuple(layout.attentions) if output_attentions else None, False, layout.padding)

    def last_layer_qkv(self, hidden_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The last layer's query, key and value vectors [B, L, H] from its input (distillation's relations),
        before the rotary positions: what the tokens hold, as BERT's."""
        layer = self.layers[-1]
        return layer.attn.Wqkv(layer.attn_norm(hidden_in)).chunk(3, -1)


# ---------------------------------------------------------------------------------------------------------
# Heads: the masked-LM decoder tied to the token table (the task heads: modernbert_task_heads.py)


class ModernBertPredictionHead(nn.Module):
    """dense, activation, norm: what the masked-LM decoder and every task classifier read."""

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size, bias=config.classifier_bias)
        self.act = ACT[config.classifier_activation]
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)

    def forward(self, x):
        return self.norm(self.act(self.dense(x)))


class ModernBertDecoder(nn.Module):
    """Scores against the token table (tied, as the released models: the checkpoint's `decoder.weight` is the
    table's other name) plus an output bias; a table of its own where config.tie_word_embeddings is false."""

    scores_vocabulary = True  # resize_token_embeddings resizes its bias, and a table of its own, with the table

    def __init__(self, config: ModernBertConfig):
        super().__init__()
        self.weight = None if config.tie_word_embeddings else \
            nn.Parameter(torch.empty(config.vocab_size, config.hidden_size))
        self.bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.decoder_bias else None

    def forward(self, x, table):
        return F.linear(x, table if self.weight is None else self.weight, self.bias)


class ModernBertForMaskedLM(ModernBertPreTrainedModel):
    """The masked LM: transformers' outputs, and `mlm_loss` (the loss under pre-training's name, outside tuples)."""

    output_bias = property(lambda self: self.decoder.bias)
    def __init__(self, config: ModernBertConfig):
        super().__init__(config)
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.decoder = ModernBertDecoder(config)
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        """With labels (-100 = not predicted), only the masked positions are scored: logits [masked, V]."""
        enc = self.model.encode(input_ids, attention_mask, **inputs)
        table = self.word_embeddings.weight
        if labels is None:
            logits, loss = self.decoder(self.head(enc.sequence()), table), None
        else:
            logits, loss = masked_lm_loss(lambda x: self.decoder(self.head(x), table), enc, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states,
                      attentions=enc.attentions, mlm_loss=loss)


TASK_HEADS = ("ModernBertTaskHead", "mean_of_rows", "ModernBertForSequenceClassification",
              "ModernBertForTokenClassification", "ModernBertForQuestionAnswering", "ModernBertForMultipleChoice")


def __getattr__(name: str):
    """The task heads, found here as before they moved to modernbert_task_heads.py (imported on first use: that
    module imports this one)."""
    if name in TASK_HEADS:
        return getattr(importlib.import_module(f"{__package__}.modernbert_task_heads"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
