"""RoBERTa (Liu et al., 2019) and XLM-RoBERTa (Conneau et al., 2020): BERT's encoder (bert.py) trained otherwise.
What differs in the model is small, and only that is here:
- positions count from pad_token_id + 1 over the tokens that are not padding (fairseq's make_positions), so an
  input holds pad_token_id + 1 tokens fewer than the position table's rows (config.max_tokens); they are computed
  from the padded batch, before the fast path packs the real tokens;
- no segments: token_type_ids are accepted and ignored (RoBERTa's tokenizer gives none; the one row of its
  token-type table is added to every token);
- the masked-LM head `lm_head` (dense, GELU, LayerNorm, then scores against the token table plus a bias);
- the sentence classifier reads the first token (<s>) through a dense layer and tanh of its own (`classifier.dense`,
  `classifier.out_proj`) instead of the pooler; multiple choice keeps the pooler, as transformers' does.
The layers, the packed fast path and the other heads are BERT's; the encoder is `roberta` in a head's state dict.
XLM-RoBERTa is the same model under its own model_type and class names.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .bert import BertModel, BertPreTrainedModel, masked_lm
from ..compat import finish
from .family_configs import RobertaConfig, XLMRobertaConfig
from .task_heads import (BertForMultipleChoice, BertForQuestionAnswering, BertForSequenceClassification,
                         BertForTokenClassification)


def positions(input_ids, inputs_embeds, padding_idx: int) -> torch.Tensor:
    """[B, L]: each token's position, counted from padding_idx + 1 over the tokens that are not padding, padding at
    padding_idx (transformers' create_position_ids_from_input_ids); inputs_embeds do not say which are padding, so
    from them every token is counted."""
    if input_ids is None:
        batch, length = inputs_embeds.shape[:2]
        first = padding_idx + 1
        return torch.arange(first, first + length, device=inputs_embeds.device).expand(batch, length)
    real = input_ids.ne(padding_idx).long()  # whole numbers: ONNX sums no booleans
    return real.cumsum(-1) * real + padding_idx


class RobertaModel(BertModel):
    """BERT's encoder with RoBERTa's positions and no segments: last_hidden_state, pooler_output, hidden_states."""

    base_model_prefix = "roberta"
    config_class = RobertaConfig

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, *, position_ids=None,
               inputs_embeds=None, **inputs):
        if position_ids is None and (input_ids is None) != (inputs_embeds is None):
            position_ids = positions(input_ids, inputs_embeds, self.config.pad_token_id)
        return super().encode(input_ids, attention_mask, position_ids=position_ids, inputs_embeds=inputs_embeds,
                              **inputs)


class RobertaPreTrainedModel(BertPreTrainedModel):
    """What RoBERTa's heads share: the config, and the encoder's class and name."""

    base_model_prefix = "roberta"
    config_class = RobertaConfig
    encoder_class = RobertaModel


class RobertaLMHead(nn.Module):
    """Dense, GELU, LayerNorm, then scores against the token table (tied: a checkpoint's `lm_head.decoder.weight` is
    the table's other name, `lm_head.decoder.bias` this bias's) plus an output bias."""

    scores_vocabulary = True  # resize_token_embeddings resizes its bias with the table

    def __init__(self, config: RobertaConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x, embedding_weight):
        return F.linear(self.layer_norm(F.gelu(self.dense(x))), embedding_weight, self.bias)


class RobertaForMaskedLM(RobertaPreTrainedModel):
    """The masked LM: transformers' outputs, and `mlm_loss` (the loss under pre-training's name, outside tuples)."""

    output_bias = property(lambda self: self.lm_head.bias)

    def __init__(self, config: RobertaConfig):
        super().__init__(config)
        self.roberta = self.encoder_class(config, add_pooling_layer=False)
        self.lm_head = RobertaLMHead(config)
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        """With labels (-100 = not predicted), only the masked positions are scored: logits [masked, V]."""
        enc = self.roberta.encode(input_ids, attention_mask, **inputs)
        logits, loss = masked_lm(self.lm_head, self.word_embeddings.weight, enc, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states,
                      attentions=enc.attentions, mlm_loss=loss)


class RobertaClassificationHead(nn.Module):
    """The sentence classifier after the first dropout: dense, tanh, dropout, out_proj."""

    activation = staticmethod(torch.tanh)  # ELECTRA's: GELU

    def __init__(self, config: RobertaConfig, num_outputs: int, dropout: float):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(config.hidden_size, num_outputs)

    def forward(self, x):
        return self.out_proj(self.dropout(self.activation(self.dense(x))))


class RobertaForSequenceClassification(RobertaPreTrainedModel, BertForSequenceClassification):
    """BERT's head and losses, reading the first token (<s>) through the classifier's own dense layer and tanh."""

    uses_pooler = False

    def head_layer(self, config: RobertaConfig, num_outputs: int) -> nn.Module:
        return RobertaClassificationHead(config, num_outputs, self.dropout.p)

    def head_input(self, enc):
        return enc.pooled_tokens()


class RobertaForTokenClassification(RobertaPreTrainedModel, BertForTokenClassification):
    pass


class RobertaForQuestionAnswering(RobertaPreTrainedModel, BertForQuestionAnswering):
    pass


class RobertaForMultipleChoice(RobertaPreTrainedModel, BertForMultipleChoice):
    pass


# XLM-RoBERTa: RoBERTa's classes under transformers' names, reading XLM-RoBERTa's config.json


class XLMRobertaModel(RobertaModel):
    config_class = XLMRobertaConfig


class XLMRobertaForMaskedLM(RobertaForMaskedLM):
    config_class = XLMRobertaConfig


class XLMRobertaForSequenceClassification(RobertaForSequenceClassification):
    config_class = XLMRobertaConfig


class XLMRobertaForTokenClassification(RobertaForTokenClassification):
    config_class = XLMRobertaConfig


class XLMRobertaForQuestionAnswering(RobertaForQuestionAnswering):
    config_class = XLMRobertaConfig


class XLMRobertaForMultipleChoice(RobertaForMultipleChoice):
    config_class = XLMRobertaConfig
