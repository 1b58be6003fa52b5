"""ModernBERT's task heads (modernbert.py's encoder and prediction head, dropout, one linear layer): sequence
classification (pooled by config.classifier_pooling: the first token, or the real tokens' mean), token
classification, question answering and multiple choice, with transformers' names and outputs; their losses are
BERT's (task_heads.py)."""

import torch
from torch import nn

from ..compat import finish
from .modernbert import ModernBertModel, ModernBertPreTrainedModel, ModernBertPredictionHead
from .modernbert_config import ModernBertConfig
from .packing import EncoderOutput
from .task_heads import choice_outputs, flatten_choices, sequence_loss, span_outputs, token_loss


class ModernBertTaskHead(ModernBertPreTrainedModel):
    """The encoder, the prediction head, dropout and one linear layer of `num_outputs`; a sequence-level head pools
    by config.classifier_pooling (cls: the first token; mean: the real tokens' mean), a token-level one reads every
    token."""

    per_token = False

    def __init__(self, config: ModernBertConfig, num_outputs: int):
        super().__init__(config)
        self.model = ModernBertModel(config)
        self.head = ModernBertPredictionHead(config)
        self.drop = nn.Dropout(config.classifier_dropout)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        self.init_weights()

    def head_outputs(self, input_ids, attention_mask, inputs: dict):
        enc = self.model.encode(input_ids, attention_mask, **inputs)
        if self.per_token:
            x = enc.sequence()
        elif self.config.classifier_pooling == "cls":
            x = enc.pooled_tokens()
        else:
            x = mean_of_rows(enc)
        return self.classifier(self.drop(self.head(x))), dict(hidden_states=enc.hidden_states,
                                                             attentions=enc.attentions)


def mean_of_rows(enc: EncoderOutput) -> torch.Tensor:
    """[B, H]: each row's mean over its real tokens."""
    if enc.packing is None:
        if enc.padding is None:
            return enc.x.mean(1)
        weights = enc.padding.to(enc.x.dtype)[..., None]
        return (enc.x * weights).sum(1) / weights.sum(1)
    sums = enc.x.new_zeros(enc.batch, enc.x.shape[-1]).index_add_(0, enc.packing.rows, enc.x)
    counts = torch.bincount(enc.packing.rows, minlength=enc.batch).to(enc.x.dtype)
    return sums / counts[:, None]


class ModernBertForSequenceClassification(ModernBertTaskHead):
    """Classification, or regression with one label; multi-label with problem_type multi_label_classification."""

    def __init__(self, config: ModernBertConfig):
        super().__init__(config, config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, groups=None,
                return_dict=True, **inputs):
        logits, states = self.head_outputs(input_ids, attention_mask, inputs)
        return finish(return_dict, loss=sequence_loss(self.config, logits, labels, groups), logits=logits, **states)


class ModernBertForTokenClassification(ModernBertTaskHead):
    per_token = True

    def __init__(self, config: ModernBertConfig):
        super().__init__(config, config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        logits, states = self.head_outputs(input_ids, attention_mask, inputs)
        return finish(return_dict, loss=token_loss(logits, labels), logits=logits, **states)


class ModernBertForQuestionAnswering(ModernBertTaskHead):
    per_token = True

    def __init__(self, config: ModernBertConfig):
        super().__init__(config, 2)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, start_positions=None,
                end_positions=None, return_dict=True, **inputs):
        logits, states = self.head_outputs(input_ids, attention_mask, inputs)
        start_logits, end_logits, loss = span_outputs(logits, attention_mask, start_positions, end_positions)
        return finish(return_dict, loss=loss, start_logits=start_logits, end_logits=end_logits, **states)


class ModernBertForMultipleChoice(ModernBertTaskHead):
    def __init__(self, config: ModernBertConfig):
        super().__init__(config, 1)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, choice_mask=None,
                return_dict=True, **inputs):
        batch, choices, flat, inputs = flatten_choices(input_ids, attention_mask, None, inputs)
        logits, states = self.head_outputs(flat[0], flat[1], inputs)
        logits, loss = choice_outputs(logits, batch, choices, choice_mask, labels)
        return finish(return_dict, loss=loss, logits=logits, **states)
