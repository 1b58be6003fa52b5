"""BERT (Devlin et al., 2019), top to bottom: embeddings, encoder, pooler, pre-training heads. The task heads
fine-tuning puts on the encoder are in task_heads.py (importable from here too, as before).

Parameter names follow the Hugging Face layout, so their checkpoints load without a renaming table.
Departures in how the work is done, not in the numbers:
- when a batch has padding, every layer except the attention product runs on the real tokens alone (packed
  into one [tokens, hidden] matrix, see packing.py), from the embedding look-up on; the masked-LM head
  scores only the masked positions when labels are given, and the pre-training and sequence heads read
  their rows straight from the packed matrix;
- in training with dropout, each `DropoutSite` draws its keep mask as it runs (packing.DropoutNoise, bool
  masks), applied fused with the residual add (addcmul) and after the attention softmax, with the attention
  products written out (baddbmm, softmax, bmm) since CPU SDPA has no fused dropout path. Eval, and training
  without dropout, use SDPA.
Both ride on one `packing.Layout` per forward pass, which every layer takes. With output_attentions, the
attention products are written out too, to return the probabilities (padded query rows hold zeros).
One departure in the numbers: a left-to-right model (`is_decoder`, causal attention, the paper's LTR ablation)
pools its last real token, since its [CLS] sees only itself; transformers pools [CLS] there too, so the pooled
output and the classifiers of such checkpoints differ from its (the hidden states agree).
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ..formats.checkpoint import PretrainedMixin
from ..compat import ModelApiMixin, finish
from .config import BertConfig
from .heads import ENCODER, HEADS, head_class
from .initialisation import init_bert_weights, truncated_normal_  # noqa: F401 (truncated_normal_: also here)
from .packing import DropoutNoise, DropoutSite, EncoderOutput, Layout, Packing


ACT = {"gelu": F.gelu,  # exact erf form, as the paper
       **dict.fromkeys(("gelu_new", "gelu_pytorch_tanh"), lambda x: F.gelu(x, approximate="tanh")),  # Google's code
       "relu": F.relu, "silu": F.silu}


# ---------------------------------------------------------------------------------------------------------
# Input representation (spec section 3): token + segment + position embeddings, LayerNorm, dropout


class BertEmbeddings(nn.Module):
    """`width`: the tables' (ELECTRA's embedding_size; hidden_size by default). Tables narrower than the encoder
    take a dropout of their own, the layout's masks being hidden_size wide."""

    def __init__(self, config: BertConfig, width: int | None = None):
        super().__init__()
        width = width or config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.LayerNorm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.dropout = DropoutSite("hidden") if width == config.hidden_size else nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids, layout: Layout, inputs_embeds=None):
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        x = x + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        x = self.LayerNorm(x)
        if isinstance(self.dropout, nn.Dropout):
            return self.dropout(x)
        keep = self.dropout(layout)
        return keep.apply(x) if keep is not None else x


# ---------------------------------------------------------------------------------------------------------
# Encoder layer, post-LayerNorm: x = LN(x + Dropout(W_o . MHSA(x))); x = LN(x + Dropout(W_2 . GELU(W_1 . x)))


class BertSelfAttention(nn.Module):
    projections = ("query", "key", "value")  # the Q, K and V Linears' names (other families name theirs)

    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = DropoutSite("attention")
        self.fused = None  # see fuse()

    def qkv_parameters(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Q, K and V stacked [3 H, H] and [3 H] for one matmul; the three keep their own (reference) names."""
        lins = [getattr(self, name) for name in self.projections]
        return torch.cat([lin.weight for lin in lins]), torch.cat([lin.bias for lin in lins])

    def fuse(self) -> None:
        """For inference: one Linear [H -> 3 H] in place of the three projections, one layer to int8 quantisation
        (runtime.quantize_int8); without the reference names, a fused model is for running, not training or saving."""
        weight, bias = self.qkv_parameters()
        self.fused = nn.Linear(weight.shape[1], weight.shape[0], device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            self.fused.weight.copy_(weight)
            self.fused.bias.copy_(bias)
        for name in self.projections:
            delattr(self, name)

    def forward(self, x: torch.Tensor, layout: Layout) -> torch.Tensor:
        """softmax(Q K^T / sqrt(d) + padding mask) V, per head; dropout on the attention probabilities."""
        return layout.merge_heads(self.attend(self.heads(x, layout), layout))

    def heads(self, x: torch.Tensor, layout: Layout) -> tuple[torch.Tensor, ...]:
        """Q, K and V of the packed tokens `x`, each [B, heads, L, d]."""
        projected = self.fused(x) if self.fused is not None else F.linear(x, *self.qkv_parameters())
        return layout.split_heads(projected, self.num_heads)

    def attend(self, qkv, layout: Layout, bias: torch.Tensor | None = None) -> torch.Tensor:
        """The attention product [B, heads, L, d]; `bias`: an additive [B or 1, heads, L, L] that holds the padding
        mask, in its place (MPNet's relative positions)."""
        q, k, v = qkv
        drop = self.dropout(layout)
        if drop is None and layout.attentions is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=layout.key_mask if bias is None else bias)
        # written out: CPU SDPA with dropout runs this product anyway, with slower masks
        q, k, v = (t.flatten(0, 1) for t in (q, k, v))
        added = layout.key_bias(self.num_heads, q) if bias is None else \
            bias.expand(layout.batch, -1, -1, -1).flatten(0, 1)
        scores = torch.baddbmm(added, q, k.transpose(1, 2), alpha=1 / math.sqrt(self.head_size))
        probs = torch.softmax(scores, dim=-1)
        if drop is not None:  # the keep mask here, its scale 1/(1-p) on the smaller product below
            probs = probs * drop.mask
        if layout.attentions is not None:
            layout.record_attention(probs if drop is None else probs * drop.scale, self.num_heads)
        context = torch.bmm(probs, v)
        if drop is not None:
            context = context.mul_(drop.scale)
        return context.view(layout.batch, self.num_heads, layout.length, self.head_size)


class BertOutput(nn.Module):
    """Projection back to H, dropout, residual add, LayerNorm: after attention (from H) and after the
    feed-forward layer (from 4H)."""

    def __init__(self, config: BertConfig, in_features: int):
        super().__init__()
        self.dense = nn.Linear(in_features, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = DropoutSite("hidden")

    def forward(self, h, residual, layout: Layout):
        keep = self.dropout(layout)
        if keep is not None:
            return self.LayerNorm(keep.add(residual, self.dense(h)))
        return self.LayerNorm(residual + self.dense(h))


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertOutput(config, config.hidden_size)

    def forward(self, x, layout: Layout):
        return self.output(self.self(x, layout), x, layout)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT[config.hidden_act]

    def forward(self, x):
        return self.act(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config, config.intermediate_size)

    def forward(self, x, layout: Layout):
        x = self.attention(x, layout)
        return self.output(self.intermediate(x), x, layout)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        self.gradient_checkpointing = False

    def forward(self, x, layout: Layout, output_hidden_states=False):
        states = [x] if output_hidden_states else None
        for layer in self.layer:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(layout.replaying(layer), x, use_reentrant=False)
            else:
                x = layer(x, layout)
            if output_hidden_states:
                states.append(x)
        return x, states


class BertPooler(nn.Module):
    """tanh(W . h_[CLS] + b): the sentence representation used by NSP and the classifiers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, tokens):
        """From the vectors [B, H] the encoder pools (EncoderOutput.pooled_tokens: [CLS], or the last token of a
        left-to-right model)."""
        return torch.tanh(self.dense(tokens))


# ---------------------------------------------------------------------------------------------------------
# The shared base: initialisation (initialisation.py) and checkpoint loading


class BertPreTrainedModel(nn.Module, PretrainedMixin, ModelApiMixin):
    base_model_prefix = "bert"
    config_class = BertConfig

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config

    def init_weights(self):
        """Truncated normal (std 0.02, cut at 2 std as Google's code) for weights, zero biases, LayerNorm 1/0."""
        init_bert_weights(self.modules(), self.config.initializer_range)

    @property
    def word_embeddings(self) -> nn.Embedding:
        return self.base_model.embeddings.word_embeddings


class BertModel(BertPreTrainedModel):
    """The encoder: returns last_hidden_state [B, L, H], pooler_output [B, H] and optionally hidden_states;
    positions that are padding hold zeros in every returned hidden state."""

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.embeddings_project = None  # ELECTRA's: its narrower tables onto the encoder's width
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
                *, return_dict=True, **inputs):
        """`inputs`: output_attentions, output_hidden_states (see encode)."""
        enc = self.encode(input_ids, attention_mask, token_type_ids, position_ids=position_ids,
                          inputs_embeds=inputs_embeds, **inputs)
        pooled = self.pooler(enc.pooled_tokens()) if self.pooler is not None else None
        return finish(return_dict, last_hidden_state=enc.sequence(), pooler_output=pooled,
                      hidden_states=enc.hidden_states, attentions=enc.attentions)

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, *, position_ids=None,
               inputs_embeds=None, output_attentions=False, output_hidden_states=False) -> EncoderOutput:
        """The encoder's output as the heads read it: packed [T, H] when the batch has padding. `inputs_embeds`
        [B, L, H] replace the token embedding look-up of `input_ids` (give one of the two); `output_attentions` adds
        each layer's attention probabilities [B, heads, L, L], zeros in padded query rows."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
        tokens = input_ids if input_ids is not None else inputs_embeds[..., 0]
        batch, length = tokens.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros(batch, length, dtype=torch.long, device=tokens.device)
        # An ONNX graph runs on the padding (a graph of data-dependent shapes runs slower): the padded path then
        padded = attention_mask is not None and torch.onnx.is_in_onnx_export()
        packing = Packing.from_attention_mask(attention_mask) if attention_mask is not None and not padded else None
        if packing is not None:  # embed the real tokens only
            input_ids, inputs_embeds, token_type_ids = (t.flatten(0, 1)[packing.indices] if t is not None else None
                                                        for t in (input_ids, inputs_embeds, token_type_ids))
            position_ids = packing.cols if position_ids is None else position_ids.reshape(-1)[packing.indices]
        elif position_ids is None:
            position_ids = torch.arange(length, device=tokens.device).expand(batch, length)

        noise = DropoutNoise.of(self, token_type_ids.shape, batch, length, tokens.device)
        padding = attention_mask.bool() if padded else None
        layout = Layout(batch, length, packing, noise, [] if output_attentions else None, self.config.is_decoder,
                        tokens.device, padding)
        x = self.embeddings(input_ids, token_type_ids, position_ids, layout, inputs_embeds)
        if self.embeddings_project is not None:
            x = self.embeddings_project(x)
        x, states = self.encoder(x, layout, output_hidden_states)
        if layout.noise is not None:
            layout.noise.check_used()
        if packing is not None and states:
            states = [packing.unpack(s) for s in states]
        return EncoderOutput(x, packing, batch, length, tuple(states) if states else None,
                       tuple(layout.attentions) if output_attentions else None, self.config.is_decoder, padding)

    def last_layer_qkv(self, hidden_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The last layer's query, key and value vectors [B, L, H] from its input (distillation's relations)."""
        attention = self.encoder.layer[-1].attention.self
        return attention.query(hidden_in), attention.key(hidden_in), attention.value(hidden_in)


# ---------------------------------------------------------------------------------------------------------
# Pre-training heads (spec section 4): masked-LM decoder tied to the token embeddings, NSP on the pooled output


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACT[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, x):
        return self.LayerNorm(self.act(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Dense, GELU, LayerNorm, then scores against the (tied) token embedding matrix plus an output bias."""

    scores_vocabulary = True  # resize_token_embeddings resizes its bias with the table

    def __init__(self, config: BertConfig):
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x, embedding_weight):
        return F.linear(self.transform(x), embedding_weight, self.bias)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = BertLMPredictionHead(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)


def masked_lm(head: BertLMPredictionHead, embedding_weight, encoded: EncoderOutput, labels):
    """Masked-LM (logits, loss): logits [B, L, V] without labels; with labels (-100 = not predicted), only the
    masked positions are scored, logits [masked, V] in row-major order."""
    if labels is None:
        return head(encoded.sequence(), embedding_weight), None
    return masked_lm_loss(lambda x: head(x, embedding_weight), encoded, labels)


def masked_lm_loss(score, encoded: EncoderOutput, labels):
    """`score`'s logits [masked, V] of the positions labels mark (not -100), in row-major order, and the mean
    cross-entropy over them."""
    flat = labels.reshape(-1)
    positions = (flat != -100).nonzero().squeeze(1)
    logits = score(encoded.rows(positions))
    return logits, F.cross_entropy(logits.float(), flat[positions])


class BertForPreTraining(BertPreTrainedModel):
    """Masked LM + next sentence prediction. Loss = mean CE over masked positions + mean CE of NSP."""

    output_bias = property(lambda self: self.cls.predictions.bias)  # the masked-LM head's, per vocabulary entry

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None,
                next_sentence_label=None, return_dict=True, **inputs):
        enc = self.bert.encode(input_ids, attention_mask, token_type_ids, **inputs)
        mlm_logits, mlm_loss = masked_lm(self.cls.predictions, self.word_embeddings.weight, enc, labels)
        nsp_logits = self.cls.seq_relationship(self.bert.pooler(enc.pooled_tokens()))
        nsp_loss = None if next_sentence_label is None else F.cross_entropy(nsp_logits.float(), next_sentence_label)
        losses = [x for x in (mlm_loss, nsp_loss) if x is not None]
        return finish(return_dict, loss=sum(losses) if losses else None, prediction_logits=mlm_logits,
                      seq_relationship_logits=nsp_logits, hidden_states=enc.hidden_states, attentions=enc.attentions,
                      mlm_loss=mlm_loss, nsp_loss=nsp_loss)


class BertForMaskedLM(BertPreTrainedModel):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        enc = self.bert.encode(input_ids, attention_mask, token_type_ids, **inputs)
        logits, loss = masked_lm(self.cls.predictions, self.word_embeddings.weight, enc, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states, attentions=enc.attentions)


def __getattr__(name: str):
    """The task heads, found here as before they moved to task_heads.py (imported on first use: that module
    imports this one)."""
    if name in HEADS and HEADS[name].module != ENCODER:
        return head_class(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
