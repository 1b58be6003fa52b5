"""DistilBERT (Sanh et al., 2019), top to bottom: BERT (bert.py) at half the depth, distilled from it, with
transformers' own names for its parts (`distilbert.transformer.layer.N.attention.q_lin`, `ffn.lin1`, ...).
What differs from BERT in the model:
- no segments: token_type_ids are accepted and ignored; positions learned, or fixed sinusoids in the same table
  (config.sinusoidal_pos_embds);
- no dropout after the attention's output projection, only after the feed-forward; the norms' epsilon 1e-12;
- no pooler: the sentence classifiers read the first token through `pre_classifier` and ReLU;
- the masked-LM head: vocab_transform, the activation, vocab_layer_norm, then `vocab_projector` (its weight the
  token table, its bias its own);
- each head's dropout rate its own (seq_classif_dropout, qa_dropout; token classification: dropout).
The attention product, the packed fast path (packing.Layout), the encoder's pass and the heads' losses are BERT's.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .bert import ACT, BertEncoder, BertModel, BertPreTrainedModel, BertSelfAttention, masked_lm_loss
from ..compat import finish
from .family_configs import DistilBertConfig
from .packing import DropoutSite, Layout
from .task_heads import (BertForMultipleChoice, BertForQuestionAnswering, BertForSequenceClassification,
                         BertForTokenClassification)


def sinusoids(positions: int, dim: int) -> torch.Tensor:
    """[positions, dim]: sin(pos / 10000^(2i/dim)) in the even columns, cos in the odd (transformers')."""
    pos = torch.arange(positions, dtype=torch.float64)[:, None]
    angles = pos / torch.pow(10000.0, 2 * (torch.arange(dim, dtype=torch.float64) // 2) / dim)
    table = torch.empty(positions, dim, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
    return table.float()


class DistilBertEmbeddings(nn.Module):
    """Token + position embeddings, LayerNorm, dropout."""

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.dim, padding_idx=config.pad_token_id)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.dim)
        self.LayerNorm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.dropout = DropoutSite("hidden")

    def forward(self, input_ids, token_type_ids, position_ids, layout: Layout, inputs_embeds=None):
        x = self.word_embeddings(input_ids) if inputs_embeds is None else inputs_embeds
        x = self.LayerNorm(x + self.position_embeddings(position_ids))
        keep = self.dropout(layout)
        return keep.apply(x) if keep is not None else x


class DistilBertSelfAttention(BertSelfAttention):
    """BERT's attention product (bert.BertSelfAttention) on DistilBERT's projections q_lin, k_lin, v_lin, and the
    output projection out_lin."""

    projections = ("q_lin", "k_lin", "v_lin")

    def __init__(self, config: DistilBertConfig):
        nn.Module.__init__(self)
        self.num_heads, self.head_size = config.n_heads, config.dim // config.n_heads
        self.q_lin, self.k_lin, self.v_lin, self.out_lin = (nn.Linear(config.dim, config.dim) for _ in range(4))
        self.dropout = DropoutSite("attention")
        self.fused = None

    def forward(self, x, layout: Layout):
        return self.out_lin(super().forward(x, layout))


class DistilBertFFN(nn.Module):
    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.lin1 = nn.Linear(config.dim, config.hidden_dim)
        self.lin2 = nn.Linear(config.hidden_dim, config.dim)
        self.act = ACT[config.activation]
        self.dropout = DropoutSite("hidden")

    def forward(self, x, layout: Layout):
        """x + Dropout(lin2(act(lin1(x)))), the residual added fused with the dropout."""
        h = self.lin2(self.act(self.lin1(x)))
        keep = self.dropout(layout)
        return keep.add(x, h) if keep is not None else x + h


class DistilBertLayer(nn.Module):
    """Post-LayerNorm: x = LN(x + Attn(x)); x = LN(x + Dropout(FFN(x)))."""

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.attention = DistilBertSelfAttention(config)
        self.sa_layer_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.ffn = DistilBertFFN(config)
        self.output_layer_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)

    def forward(self, x, layout: Layout):
        x = self.sa_layer_norm(x + self.attention(x, layout))
        return self.output_layer_norm(self.ffn(x, layout))


class DistilBertTransformer(BertEncoder):
    """The layers, run as BERT's encoder runs them (gradient checkpointing, hidden states)."""

    def __init__(self, config: DistilBertConfig):
        nn.Module.__init__(self)
        self.layer = nn.ModuleList(DistilBertLayer(config) for _ in range(config.n_layers))
        self.gradient_checkpointing = False


class DistilBertPreTrainedModel(BertPreTrainedModel):
    """What DistilBERT's models share: the config, the encoder's name, and the initialisation (BERT's, the padding
    token's row zero, the sinusoids where the config asks for them)."""

    base_model_prefix = "distilbert"
    config_class = DistilBertConfig

    def init_weights(self):
        super().init_weights()
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, DistilBertEmbeddings):
                    if module.word_embeddings.padding_idx is not None:
                        module.word_embeddings.weight[module.word_embeddings.padding_idx] = 0
                    if self.config.sinusoidal_pos_embds:
                        module.position_embeddings.weight.copy_(sinusoids(*module.position_embeddings.weight.shape))


class DistilBertModel(DistilBertPreTrainedModel, BertModel):
    """The encoder: last_hidden_state [B, L, H] and optionally hidden_states (the embeddings' and each layer's), as
    transformers returns them; BERT's encode (the packed fast path) over DistilBERT's layers. No pooler."""

    embeddings_project = None  # the tables are the encoder's width (BERT's encode reads ELECTRA's projection)

    def __init__(self, config: DistilBertConfig, add_pooling_layer: bool = False):
        BertPreTrainedModel.__init__(self, config)
        self.embeddings = DistilBertEmbeddings(config)
        self.transformer = DistilBertTransformer(config)
        self.pooler = None
        self.init_weights()

    @property
    def encoder(self):
        """BERT's name for the layers (what BertModel.encode and gradient checkpointing read)."""
        return self.transformer

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
                *, return_dict=True, **inputs):
        enc = self.encode(input_ids, attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds, **inputs)
        return finish(return_dict, last_hidden_state=enc.sequence(), hidden_states=enc.hidden_states,
                      attentions=enc.attentions)

    def last_layer_qkv(self, hidden_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
        attention = self.transformer.layer[-1].attention
        return attention.q_lin(hidden_in), attention.k_lin(hidden_in), attention.v_lin(hidden_in)


# ---------------------------------------------------------------------------------------------------------
# Heads: the masked LM on the token table; the task heads, BERT's (task_heads.TaskHead) with DistilBERT's names


class DistilBertVocabProjector(nn.Module):
    """Scores against the token table (tied: a checkpoint's `vocab_projector.weight` is the table's other name) plus
    an output bias of its own."""

    scores_vocabulary = True  # resize_token_embeddings resizes its bias with the table

    def __init__(self, config: DistilBertConfig):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x, table):
        return F.linear(x, table, self.bias)


class DistilBertForMaskedLM(DistilBertPreTrainedModel):
    """The masked LM: transformers' outputs, and `mlm_loss` (the loss under pre-training's name, outside tuples)."""

    output_bias = property(lambda self: self.vocab_projector.bias)

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.activation = ACT[config.activation]
        self.distilbert = DistilBertModel(config)
        self.vocab_transform = nn.Linear(config.dim, config.dim)
        self.vocab_layer_norm = nn.LayerNorm(config.dim, eps=config.layer_norm_eps)
        self.vocab_projector = DistilBertVocabProjector(config)
        self.init_weights()

    def score(self, x):
        x = self.vocab_layer_norm(self.activation(self.vocab_transform(x)))
        return self.vocab_projector(x, self.word_embeddings.weight)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        """With labels (-100 = not predicted), only the masked positions are scored: logits [masked, V]."""
        enc = self.distilbert.encode(input_ids, attention_mask, **inputs)
        if labels is None:
            logits, loss = self.score(enc.sequence()), None
        else:
            logits, loss = masked_lm_loss(self.score, enc, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states,
                      attentions=enc.attentions, mlm_loss=loss)


class DistilBertTaskHead(DistilBertPreTrainedModel):
    """BERT's task head (task_heads.TaskHead) on DistilBERT's encoder, with the head's own dropout rate."""

    encoder_class = DistilBertModel
    uses_pooler = False
    dropout_rate = "dropout"  # the config field of the dropout before the head layer

    def __init__(self, config: DistilBertConfig):
        super().__init__(config)
        self.dropout.p = getattr(config, self.dropout_rate)


class DistilBertFirstToken(DistilBertTaskHead):
    """The sentence heads: the first token ([CLS]) through pre_classifier and ReLU, dropout, then the classifier."""

    dropout_rate = "seq_classif_dropout"

    def head_layer(self, config: DistilBertConfig, num_outputs: int) -> nn.Module:
        self.pre_classifier = nn.Linear(config.dim, config.dim)  # here: TaskHead initialises what it has built
        return nn.Linear(config.dim, num_outputs)

    def head_input(self, enc):
        return F.relu(self.pre_classifier(enc.pooled_tokens()))


class DistilBertForSequenceClassification(DistilBertFirstToken, BertForSequenceClassification):
    pass


class DistilBertForMultipleChoice(DistilBertFirstToken, BertForMultipleChoice):
    pass


class DistilBertForTokenClassification(DistilBertTaskHead, BertForTokenClassification):
    pass


class DistilBertForQuestionAnswering(DistilBertTaskHead, BertForQuestionAnswering):
    dropout_rate = "qa_dropout"

