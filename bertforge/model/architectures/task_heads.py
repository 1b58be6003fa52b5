"""Task heads (spec section 7): one small layer on the shared encoder of bert.py, fine-tuned with it.

Sequence classification and regression on the pooled output, token classification, extractive question
answering (start and end scores per token) and multiple choice (a score per choice). Parameter names follow
the Hugging Face layout (`bert.*`, `classifier`, `qa_outputs`), as in bert.py.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .bert import BertModel, BertPreTrainedModel
from ..compat import finish
from .config import BertConfig


def ranking_loss(logits: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """The reranker's training loss: each query's passages compete for its relevance (listwise softmax cross-entropy).

    Rows with the same group id in a batch are one query's passages. A group of several rows with a relevant one is
    scored by the cross-entropy between the softmax of its logits and its relevance normalised to sum 1 (with one
    relevant passage: -log softmax(logits)[relevant]), the listwise loss of ListNet (Cao et al. 2007) and of BERT
    rerankers' localized contrastive estimation (Gao et al. 2021). A row alone in its group, or in one with nothing
    relevant, is scored by binary cross-entropy on its logit, as a pair classifier. The mean is over the groups and
    the lone rows. Pointwise binary cross-entropy alone barely learns to rank from a sentence encoder in a few hundred
    steps (BENCHMARKS.md, "Rankers"): its easiest descent is the base rate of relevant pairs.

    `logits` [B, 1], `labels` [B] relevance from 0 to 1, `groups` [B] a query's id per row.
    """
    scores, labels = logits.float().reshape(-1), labels.float().reshape(-1)
    same = groups.reshape(-1, 1) == groups.reshape(1, -1)  # [B, B]: row j is in row i's group
    mass = (labels.reshape(1, -1) * same).sum(-1)  # the relevance in each row's group
    ranked = (same.sum(-1) > 1) & (mass > 0)  # rows of the groups ranked listwise
    first = same.float().argmax(-1) == torch.arange(len(scores), device=scores.device)  # a group's first row
    log_p = scores.reshape(1, -1).masked_fill(~same, -torch.inf).log_softmax(-1).masked_fill(~same, 0.0)
    target = labels.reshape(1, -1) * same / mass.clamp(min=1e-12).reshape(-1, 1)
    listwise = -(target * log_p).sum(-1)[ranked & first]
    alone = ~ranked
    pointwise = F.binary_cross_entropy_with_logits(scores[alone], labels[alone], reduction="sum")
    return (listwise.sum() + pointwise) / (len(listwise) + int(alone.sum()))


class TaskHead(BertPreTrainedModel):
    """An encoder plus dropout and one linear layer of `num_outputs` on the pooled or per-token output."""

    uses_pooler = True
    head_name = "classifier"  # the reference's parameter name for the layer
    encoder_class = BertModel  # the encoder, named base_model_prefix (RoBERTa's heads: roberta.RobertaModel)

    def __init__(self, config: BertConfig, num_outputs: int):
        super().__init__(config)
        setattr(self, self.base_model_prefix, self.encoder_class(config, add_pooling_layer=self.uses_pooler))
        p = config.classifier_dropout if config.classifier_dropout is not None else config.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        setattr(self, self.head_name, self.head_layer(config, num_outputs))
        self.init_weights()

    def head_layer(self, config: BertConfig, num_outputs: int) -> nn.Module:
        """The layer after the dropout (RoBERTa's sentence classifier has a dense layer of its own before it)."""
        return nn.Linear(config.hidden_size, num_outputs)

    def head_input(self, enc):
        """What the head reads of the encoder's output: the pooled first token, or every token."""
        return self.base_model.pooler(enc.pooled_tokens()) if self.uses_pooler else enc.sequence()

    def head_outputs(self, input_ids, attention_mask, token_type_ids, inputs: dict):
        """The head's outputs and the encoder's (hidden_states, attentions); `inputs` are encode's keywords."""
        enc = self.base_model.encode(input_ids, attention_mask, token_type_ids, **inputs)
        return getattr(self, self.head_name)(self.dropout(self.head_input(enc))), dict(
            hidden_states=enc.hidden_states, attentions=enc.attentions)


class BertForSequenceClassification(TaskHead):
    """Classification (num_labels > 1) or regression (num_labels == 1) on the pooled [CLS] output; with problem_type
    multi_label_classification, a sigmoid per output (binary cross-entropy), as transformers. With `groups` (a
    reranker's training: a query's id per row), the rows of a query are ranked against each other (ranking_loss)."""

    def __init__(self, config: BertConfig):
        super().__init__(config, config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, groups=None,
                return_dict=True, **inputs):
        logits, states = self.head_outputs(input_ids, attention_mask, token_type_ids, inputs)
        return finish(return_dict, loss=sequence_loss(self.config, logits, labels, groups), logits=logits, **states)


class BertForTokenClassification(TaskHead):
    """A label per token (NER); labels of -100 are ignored (every piece but a word's first)."""

    uses_pooler = False

    def __init__(self, config: BertConfig):
        super().__init__(config, config.num_labels)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        logits, states = self.head_outputs(input_ids, attention_mask, token_type_ids, inputs)
        return finish(return_dict, loss=token_loss(logits, labels), logits=logits, **states)


class BertForQuestionAnswering(TaskHead):
    """Span extraction: start and end vectors S and E scored against every real token (padding scores lowest)."""

    uses_pooler = False
    head_name = "qa_outputs"

    def __init__(self, config: BertConfig):
        super().__init__(config, 2)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, start_positions=None,
                end_positions=None, return_dict=True, **inputs):
        logits, states = self.head_outputs(input_ids, attention_mask, token_type_ids, inputs)
        start_logits, end_logits, loss = span_outputs(logits, attention_mask, start_positions, end_positions)
        return finish(return_dict, loss=loss, start_logits=start_logits, end_logits=end_logits, **states)


class BertForMultipleChoice(TaskHead):
    """Inputs [B, C, L]: one score per choice from a vector on [CLS], softmax across the choices.

    `choice_mask` [B, C] (an extension) lets examples with fewer choices share a batch with padded choices.
    """

    def __init__(self, config: BertConfig):
        super().__init__(config, 1)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, choice_mask=None,
                return_dict=True, **inputs):
        batch, choices, flat, inputs = flatten_choices(input_ids, attention_mask, token_type_ids, inputs)
        logits, states = self.head_outputs(*flat, inputs)
        logits, loss = choice_outputs(logits, batch, choices, choice_mask, labels)
        return finish(return_dict, loss=loss, logits=logits, **states)


# ---------------------------------------------------------------------------------------------------------
# What each head computes from its layer's outputs, shared by every architecture's heads (modernbert.py's too)


def sequence_loss(config, logits, labels, groups=None):
    """Cross-entropy, mean squared error with one label, binary cross-entropy per output for
    multi_label_classification; with `groups` (a query's id per row), the ranking loss of each query's rows."""
    if labels is None:
        return None
    if groups is not None:
        return ranking_loss(logits, labels, groups)
    if config.problem_type == "multi_label_classification":  # one output: a reranker's relevance
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float().reshape(logits.shape))
    if config.num_labels == 1:
        return F.mse_loss(logits.squeeze(-1).float(), labels.float())
    return F.cross_entropy(logits.float(), labels)


def token_loss(logits, labels):
    """Cross-entropy per token; labels of -100 are ignored."""
    if labels is None:
        return None
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), ignore_index=-100)


def span_outputs(logits, attention_mask, start_positions, end_positions):
    """Start and end scores per token from [B, L, 2] (padding scores lowest: an answer never lies there), and the
    mean of the two cross-entropies when the positions are given (those outside the input ignored, as the
    reference does)."""
    logits = logits.float()
    if attention_mask is not None:
        logits = logits.masked_fill(~attention_mask.bool()[..., None], torch.finfo(logits.dtype).min)
    start_logits, end_logits = logits.unbind(-1)
    loss = None
    if start_positions is not None and end_positions is not None:
        loss = span_cross_entropy(start_logits, end_logits, start_positions, end_positions)
    return start_logits, end_logits, loss


def span_cross_entropy(start_logits, end_logits, start_positions, end_positions):
    """The mean of the start's and the end's cross-entropy (positions outside the input ignored, as the reference
    does)."""
    length = start_logits.shape[1]
    return (F.cross_entropy(start_logits, start_positions.clamp(0, length), ignore_index=length)
            + F.cross_entropy(end_logits, end_positions.clamp(0, length), ignore_index=length)) / 2


def flatten_choices(input_ids, attention_mask, token_type_ids, inputs: dict):
    """Inputs [B, C, L] as [B * C, L] rows: (B, C, the rows' input_ids/attention_mask/token_type_ids, inputs)."""
    given = input_ids if input_ids is not None else inputs.get("inputs_embeds")
    batch, choices = given.shape[:2] if given is not None else (0, 0)  # (encode says what is missing)
    flat = [t.flatten(0, 1) if torch.is_tensor(t) else t for t in (input_ids, attention_mask, token_type_ids)]
    inputs = {k: v.flatten(0, 1) if torch.is_tensor(v) else v for k, v in inputs.items()}
    return batch, choices, flat, inputs


def choice_outputs(logits, batch: int, choices: int, choice_mask, labels):
    """[B, C] scores (padded choices at -inf) and the cross-entropy across the choices."""
    logits = logits.view(batch, choices)
    if choice_mask is not None:
        logits = logits.masked_fill(~choice_mask.bool(), -math.inf)
    return logits, None if labels is None else F.cross_entropy(logits.float(), labels)
