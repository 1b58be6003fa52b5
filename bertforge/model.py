"""BERT (Devlin et al., 2019), top to bottom: embeddings, encoder, pooler, pre-training heads, task heads.

Parameter names follow the Hugging Face layout, so their checkpoints load without a renaming table.
One departure in how the work is done, not in the numbers: when a batch has padding, every layer except
the attention product runs on the real tokens alone (packed into one [tokens, hidden] matrix), and the
masked-LM head scores only the masked positions when labels are given.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .checkpoint import PretrainedMixin
from .config import BertConfig


class ModelOutput(dict):
    """A dict whose entries are also attributes, like the reference library's outputs."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


ACT = {
    "gelu": F.gelu,  # exact erf form, as the paper
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
}


# ---------------------------------------------------------------------------------------------------------
# Padding: where the real tokens are


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

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(self.batch * self.length, *x.shape[2:]).index_select(0, self.indices)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        out = x.new_zeros(self.batch * self.length, *x.shape[1:]).index_copy(0, self.indices, x)
        return out.view(self.batch, self.length, *x.shape[1:])


# ---------------------------------------------------------------------------------------------------------
# Input representation (spec section 3): token + segment + position embeddings, LayerNorm, dropout


class BertEmbeddings(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids):
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
        x = x + self.position_embeddings(position_ids)
        return self.dropout(self.LayerNorm(x))


# ---------------------------------------------------------------------------------------------------------
# Encoder layer, post-LayerNorm: x = LN(x + Dropout(W_o . MHSA(x))); x = LN(x + Dropout(W_2 . GELU(W_1 . x)))


class BertSelfAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_prob = config.attention_probs_dropout_prob

    def forward(self, x: torch.Tensor, packing: Packing | None) -> torch.Tensor:
        # One matmul for Q, K and V: the three projections keep their own (reference) parameter names.
        weight = torch.cat([self.query.weight, self.key.weight, self.value.weight])
        bias = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        qkv = F.linear(x, weight, bias)
        mask = None
        if packing is not None:
            qkv, mask = packing.unpack(qkv), packing.key_mask
        batch, length = qkv.shape[:2]
        q, k, v = qkv.view(batch, length, 3, self.num_heads, self.head_size).permute(2, 0, 3, 1, 4)
        p = self.dropout_prob if self.training else 0.0
        context = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
        context = context.transpose(1, 2).reshape(batch, length, -1)
        return packing.pack(context) if packing is not None else context


class BertSelfOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, h, residual):
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x, packing):
        return self.output(self.self(x, packing), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACT[config.hidden_act]

    def forward(self, x):
        return self.act(self.dense(x))


class BertOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, h, residual):
        return self.LayerNorm(residual + self.dropout(self.dense(h)))


class BertLayer(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x, packing):
        x = self.attention(x, packing)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))

    def forward(self, x, packing, output_hidden_states=False):
        states = [x] if output_hidden_states else None
        for layer in self.layer:
            x = layer(x, packing)
            if output_hidden_states:
                states.append(x)
        return x, states


class BertPooler(nn.Module):
    """tanh(W . h_[CLS] + b): the sentence representation used by NSP and the classifiers."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence):
        return torch.tanh(self.dense(sequence[:, 0]))


# ---------------------------------------------------------------------------------------------------------
# The shared base: initialisation and checkpoint loading


class BertPreTrainedModel(nn.Module, PretrainedMixin):
    base_model_prefix = "bert"

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config

    def init_weights(self):
        """Truncated normal (std 0.02, cut at 2 std as Google's code) for weights, zero biases, LayerNorm 1/0."""
        std = self.config.initializer_range
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.trunc_normal_(module.weight, std=std, a=-2 * std, b=2 * std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    @property
    def word_embeddings(self) -> nn.Embedding:
        bert = self if isinstance(self, BertModel) else self.bert
        return bert.embeddings.word_embeddings


class BertModel(BertPreTrainedModel):
    """The encoder: returns last_hidden_state [B, L, H], pooler_output [B, H] and optionally hidden_states.

    Positions that are padding hold zeros in every returned hidden state.
    """

    def __init__(self, config: BertConfig, add_pooling_layer: bool = True):
        super().__init__(config)
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if add_pooling_layer else None
        self.init_weights()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                output_hidden_states=False, **_):
        batch, length = input_ids.shape
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        if position_ids is None:
            position_ids = torch.arange(length, device=input_ids.device).expand(batch, length)
        packing = Packing.from_attention_mask(attention_mask) if attention_mask is not None else None

        x = self.embeddings(input_ids, token_type_ids, position_ids)
        if packing is not None:
            x = packing.pack(x)
        x, states = self.encoder(x, packing, output_hidden_states)
        if packing is not None:
            x = packing.unpack(x)
            states = states and [packing.unpack(s) for s in states]
        return ModelOutput(
            last_hidden_state=x,
            pooler_output=self.pooler(x) if self.pooler is not None else None,
            hidden_states=tuple(states) if states else None,
        )


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


def masked_lm(head: BertLMPredictionHead, embedding_weight, sequence, labels):
    """Masked-LM logits and loss. With labels (-100 = not predicted), only the masked positions are scored.

    Returns (logits, loss): logits are [B, L, V] without labels, [masked, V] with them.
    """
    if labels is None:
        return head(sequence, embedding_weight), None
    masked = labels != -100
    logits = head(sequence[masked], embedding_weight)
    return logits, F.cross_entropy(logits.float(), labels[masked])


class BertForPreTraining(BertPreTrainedModel):
    """Masked LM + next sentence prediction. Loss = mean CE over masked positions + mean CE of NSP."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config)
        self.init_weights()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                next_sentence_label=None, output_hidden_states=False, **_):
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states=output_hidden_states)
        mlm_logits, mlm_loss = masked_lm(self.cls.predictions, self.word_embeddings.weight,
                                         out.last_hidden_state, labels)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)
        nsp_loss = None if next_sentence_label is None else F.cross_entropy(nsp_logits.float(), next_sentence_label)
        losses = [x for x in (mlm_loss, nsp_loss) if x is not None]
        return ModelOutput(
            loss=sum(losses) if losses else None,
            mlm_loss=mlm_loss,
            nsp_loss=nsp_loss,
            prediction_logits=mlm_logits,
            seq_relationship_logits=nsp_logits,
            hidden_states=out.hidden_states,
        )


class BertForMaskedLM(BertPreTrainedModel):
    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.cls = BertOnlyMLMHead(config)
        self.init_weights()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, **_):
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states=output_hidden_states)
        logits, loss = masked_lm(self.cls.predictions, self.word_embeddings.weight, out.last_hidden_state, labels)
        return ModelOutput(loss=loss, logits=logits, hidden_states=out.hidden_states)


# ---------------------------------------------------------------------------------------------------------
# Task heads (spec section 7): one small layer on the shared encoder


class TaskHead(BertPreTrainedModel):
    """An encoder plus dropout and one linear layer of `num_outputs` on the pooled or per-token output."""

    uses_pooler = True
    head_name = "classifier"  # the reference's parameter name for the layer

    def __init__(self, config: BertConfig, num_outputs: int):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=self.uses_pooler)
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        setattr(self, self.head_name, nn.Linear(config.hidden_size, num_outputs))
        self.init_weights()

    def features(self, input_ids, attention_mask, token_type_ids, output_hidden_states):
        out = self.bert(input_ids, attention_mask, token_type_ids, output_hidden_states=output_hidden_states)
        x = out.pooler_output if self.uses_pooler else out.last_hidden_state
        return getattr(self, self.head_name)(self.dropout(x)), out.hidden_states


class BertForSequenceClassification(TaskHead):
    """Classification (num_labels > 1) or regression (num_labels == 1) on the pooled [CLS] output."""

    def __init__(self, config: BertConfig):
        super().__init__(config, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, **_):
        logits, states = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states)
        loss = None
        if labels is not None:
            if self.config.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1).float(), labels.float())
            elif self.config.problem_type == "multi_label_classification":
                loss = F.binary_cross_entropy_with_logits(logits.float(), labels.float())
            else:
                loss = F.cross_entropy(logits.float(), labels)
        return ModelOutput(loss=loss, logits=logits, hidden_states=states)


class BertForTokenClassification(TaskHead):
    """A label per token (NER); labels of -100 are ignored (every piece but a word's first)."""

    uses_pooler = False

    def __init__(self, config: BertConfig):
        super().__init__(config, config.num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None,
                output_hidden_states=False, **_):
        logits, states = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
        return ModelOutput(loss=loss, logits=logits, hidden_states=states)


class BertForQuestionAnswering(TaskHead):
    """Span extraction: start and end vectors S and E scored against every real token (padding scores lowest)."""

    uses_pooler = False
    head_name = "qa_outputs"

    def __init__(self, config: BertConfig):
        super().__init__(config, 2)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, start_positions=None,
                end_positions=None, output_hidden_states=False, **_):
        logits, states = self.features(input_ids, attention_mask, token_type_ids, output_hidden_states)
        logits = logits.float()
        if attention_mask is not None:  # an answer never lies in the padding (whose states are not computed)
            logits = logits.masked_fill(~attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
        start_logits, end_logits = logits.unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            length = start_logits.shape[1]  # positions outside the input are ignored, as the reference does
            start = start_positions.clamp(0, length)
            end = end_positions.clamp(0, length)
            loss = (F.cross_entropy(start_logits, start, ignore_index=length)
                    + F.cross_entropy(end_logits, end, ignore_index=length)) / 2
        return ModelOutput(loss=loss, start_logits=start_logits, end_logits=end_logits, hidden_states=states)


class BertForMultipleChoice(TaskHead):
    """Inputs [B, C, L]: one score per choice from a vector on [CLS], softmax across the choices.

    `choice_mask` [B, C] (an extension) lets examples with fewer choices share a batch with padded choices.
    """

    def __init__(self, config: BertConfig):
        super().__init__(config, 1)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None, choice_mask=None,
                output_hidden_states=False, **_):
        batch, choices = input_ids.shape[:2]
        flat = [t.flatten(0, 1) if t is not None else None for t in (input_ids, attention_mask, token_type_ids)]
        logits, states = self.features(*flat, output_hidden_states)
        logits = logits.view(batch, choices)
        if choice_mask is not None:
            logits = logits.masked_fill(~choice_mask.bool(), -math.inf)
        loss = None if labels is None else F.cross_entropy(logits.float(), labels)
        return ModelOutput(loss=loss, logits=logits, hidden_states=states)
