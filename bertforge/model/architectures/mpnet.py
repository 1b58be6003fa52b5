"""MPNet (Song et al., 2020): BERT's post-LayerNorm layers (bert.py) with relative positions added to the attention
scores. What differs from BERT in the model, and only that is here:
- a bias per head on each attention score by the relative position of key and query, from 32 buckets (exact up to 8
  tokens apart, logarithmic to 128, either direction: transformers' MPNetEncoder.relative_position_bucket), one table
  `encoder.relative_attention_bias` [buckets, heads] shared by every layer, added with the padding mask (computed
  once per pass on the padded [L, L] grid, which the packed fast path's attention product runs on);
- absolute positions besides, counted as RoBERTa's from the padding id 1 + 1 over the tokens that are not padding
  (transformers' MPNetEmbeddings fixes padding_idx at 1), so an input holds 2 tokens fewer than the position table's
  rows (config.max_tokens); no segments: token_type_ids are accepted and ignored (MPNet has no token-type table);
- transformers' names: `encoder.layer.N.attention.attn.q`, `.k`, `.v`, `.o`, `attention.LayerNorm`, then BERT's
  `intermediate.dense`, `output.dense`, `output.LayerNorm`; the pooler `pooler.dense`; the encoder is `mpnet` in a
  head's state dict;
- the heads are RoBERTa's: the masked-LM head `lm_head` (dense, GELU, layer_norm, the token table plus a bias), the
  sentence classifier's own dense layer and tanh on <s>; multiple choice reads the pooler.
The attention product (over q, k, v, fused for inference as BERT's), the feed-forward, the packed fast path
(packing.Layout), the encoder's pass and the heads' losses are BERT's.
"""

import math

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .bert import (BertIntermediate, BertModel, BertOutput, BertPooler, BertPreTrainedModel, BertSelfAttention,
                   masked_lm)
from ..compat import finish
from .family_configs import MPNET_PADDING_IDX, MPNetConfig
from .packing import DropoutSite, Layout
from .roberta import RobertaForSequenceClassification, RobertaLMHead, positions
from .task_heads import BertForMultipleChoice, BertForQuestionAnswering, BertForTokenClassification

BUCKETS, MAX_DISTANCE = 32, 128  # transformers' MPNetEncoder: its buckets whatever the table's rows (at least 32)


def relative_position_bucket(relative_position: torch.Tensor, num_buckets: int = BUCKETS,
                             max_distance: int = MAX_DISTANCE) -> torch.Tensor:
    """Each relative position (key - query) to its bucket: half the buckets for keys to the left, half to the right;
    in each half exact up to a quarter of the buckets apart, then logarithmic up to max_distance (T5's, as
    transformers' MPNetEncoder.relative_position_bucket computes it)."""
    n = -relative_position
    half = num_buckets // 2
    bucket = (n < 0).long() * half
    n = n.abs()
    exact = half // 2
    far = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact) * (half - exact)).long()
    far = torch.clamp(far, max=half - 1)
    return bucket + torch.where(n < exact, n, far)


class MPNetEmbeddings(nn.Module):
    """Token + position embeddings (no token types), LayerNorm, dropout; the padding id's rows zero at the start."""

    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=MPNET_PADDING_IDX)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size,
                                                padding_idx=MPNET_PADDING_IDX)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = DropoutSite("hidden")

    def forward(self, input_ids, token_type_ids, position_ids, layout: Layout, inputs_embeds=None):
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        x = self.LayerNorm(x + self.position_embeddings(position_ids))
        keep = self.dropout(layout)
        return keep.apply(x) if keep is not None else x


class MPNetSelfAttention(BertSelfAttention):
    """BERT's attention product on MPNet's projections q, k, v, with the relative position bias added to the scores
    (`bias`: [B or 1, heads, L, L], the padding mask in it), and the output projection o."""

    projections = ("q", "k", "v")

    def __init__(self, config: MPNetConfig):
        nn.Module.__init__(self)
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.q, self.k, self.v, self.o = (nn.Linear(config.hidden_size, config.hidden_size) for _ in range(4))
        self.dropout = DropoutSite("attention")
        self.fused = None

    def forward(self, x, layout: Layout, bias: torch.Tensor):
        """o(softmax(Q K^T / sqrt(d) + bias) V), per head; dropout on the attention probabilities."""
        qkv = self.heads(x, layout)
        return self.o(layout.merge_heads(self.attend(qkv, layout, bias.to(qkv[0].dtype))))


class MPNetAttention(nn.Module):
    """LN(x + Dropout(attn(x))), the residual added fused with the dropout."""

    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.attn = MPNetSelfAttention(config)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = DropoutSite("hidden")

    def forward(self, x, layout: Layout, bias):
        h = self.attn(x, layout, bias)
        keep = self.dropout(layout)
        return self.LayerNorm(keep.add(x, h) if keep is not None else x + h)


class MPNetLayer(nn.Module):
    """MPNet's attention, then BERT's feed-forward (intermediate, output)."""

    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.attention = MPNetAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config, config.intermediate_size)

    def forward(self, x, layout: Layout, bias):
        x = self.attention(x, layout, bias)
        return self.output(self.intermediate(x), x, layout)


class MPNetEncoder(nn.Module):
    """The layers and the relative position bias they share, run as BERT's encoder runs them (gradient
    checkpointing, hidden states)."""

    def __init__(self, config: MPNetConfig):
        super().__init__()
        self.layer = nn.ModuleList(MPNetLayer(config) for _ in range(config.num_hidden_layers))
        self.relative_attention_bias = nn.Embedding(config.relative_attention_num_buckets,
                                                    config.num_attention_heads)
        self.gradient_checkpointing = False

    def attention_bias(self, layout: Layout) -> torch.Tensor:
        """[1, heads, L, L] the relative position bias of each score; [B, heads, L, L] with the padding keys at the
        lowest value where the batch has padding."""
        grid = torch.arange(layout.length, device=self.relative_attention_bias.weight.device)
        bias = self.relative_attention_bias(relative_position_bucket(grid[None, :] - grid[:, None]))
        bias = bias.permute(2, 0, 1)[None]
        mask = layout.key_mask
        return bias if mask is None else bias.masked_fill(~mask, torch.finfo(bias.dtype).min)

    def forward(self, x, layout: Layout, output_hidden_states=False):
        bias = self.attention_bias(layout)
        states = [x] if output_hidden_states else None
        for layer in self.layer:
            def step(x, layout, layer=layer):
                return layer(x, layout, bias)
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = checkpoint(layout.replaying(step), x, use_reentrant=False)
            else:
                x = step(x, layout)
            if output_hidden_states:
                states.append(x)
        return x, states


class MPNetPreTrainedModel(BertPreTrainedModel):
    """What MPNet's models share: the config, the encoder's name, and the initialisation (BERT's, the padding id's
    rows of the token and position tables zero, as transformers' nn.Embedding(padding_idx=1) starts them)."""

    base_model_prefix = "mpnet"
    config_class = MPNetConfig

    def init_weights(self):
        super().init_weights()
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, MPNetEmbeddings):
                    module.word_embeddings.weight[MPNET_PADDING_IDX] = 0
                    module.position_embeddings.weight[MPNET_PADDING_IDX] = 0


class MPNetModel(MPNetPreTrainedModel, BertModel):
    """The encoder: last_hidden_state, pooler_output, hidden_states, as transformers returns them; BERT's encode
    (the packed fast path) over MPNet's layers, positions counted from the padding id 1 + 1."""

    def __init__(self, config: MPNetConfig, add_pooling_layer: bool = True):
        BertPreTrainedModel.__init__(self, config)
        self.embeddings = MPNetEmbeddings(config)
        self.embeddings_project = None  # the tables are the encoder's width (BERT's encode reads ELECTRA's projection)
        self.encoder = MPNetEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.init_weights()

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, *, position_ids=None,
               inputs_embeds=None, **inputs):
        if position_ids is None and (input_ids is None) != (inputs_embeds is None):
            position_ids = positions(input_ids, inputs_embeds, MPNET_PADDING_IDX)
        return super().encode(input_ids, attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
                              **inputs)

    def last_layer_qkv(self, hidden_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        attention = self.encoder.layer[-1].attention.attn
        return attention.q(hidden_in), attention.k(hidden_in), attention.v(hidden_in)


# ---------------------------------------------------------------------------------------------------------
# Heads: RoBERTa's masked LM and sentence classifier, BERT's task heads (task_heads.TaskHead) on MPNet's encoder


class MPNetTaskHead(MPNetPreTrainedModel):
    encoder_class = MPNetModel


class MPNetForMaskedLM(MPNetTaskHead):
    """The masked LM: transformers' outputs, and `mlm_loss` (the loss under pre-training's name, outside tuples)."""

    output_bias = property(lambda self: self.lm_head.bias)

    def __init__(self, config: MPNetConfig):
        super().__init__(config)
        self.mpnet = self.encoder_class(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        """With labels (-100 = not predicted), only the masked positions are scored: logits [masked, V]."""
        enc = self.mpnet.encode(input_ids, attention_mask, **inputs)
        logits, loss = masked_lm(self.lm_head, self.word_embeddings.weight, enc, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states,
                      attentions=enc.attentions, mlm_loss=loss)


class MPNetForSequenceClassification(MPNetTaskHead, RobertaForSequenceClassification):
    """BERT's head and losses, reading the first token (<s>) through the classifier's own dense layer and tanh."""


class MPNetForTokenClassification(MPNetTaskHead, BertForTokenClassification):
    pass


class MPNetForQuestionAnswering(MPNetTaskHead, BertForQuestionAnswering):
    pass


class MPNetForMultipleChoice(MPNetTaskHead, BertForMultipleChoice):
    pass
