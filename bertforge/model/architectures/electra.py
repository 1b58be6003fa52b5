"""ELECTRA (Clark et al., 2020), the discriminator: BERT's encoder (bert.py) trained otherwise. What differs in the
model is small, and only that is here:
- the token, position and segment tables are `embedding_size` wide (electra-small: 128 for a 256-wide encoder),
  their LayerNorm too, and `embeddings_project` maps them onto hidden_size where the two differ; no pooler;
- the masked-LM head (the generator's): `generator_predictions` (dense onto embedding_size, GELU, LayerNorm), then
  `generator_lm_head`, scores against the token table plus a bias;
- the sentence classifier reads the first token through a dense layer and GELU of its own (RoBERTa's head with
  GELU for tanh); multiple choice reads it through `sequence_summary` (a projection and an activation).
The layers, the packed fast path, token classification and question answering are BERT's; the encoder is
`electra` in a head's state dict. The discriminator's own head (ElectraForPreTraining's replaced-token score) has
no head of the registry to be: its checkpoints load into the others, that head's weights unused.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .bert import ACT, BertEmbeddings, BertModel, BertPreTrainedModel, masked_lm
from ..compat import finish
from .family_configs import ElectraConfig
from .roberta import RobertaClassificationHead, RobertaForSequenceClassification
from .task_heads import BertForMultipleChoice, BertForQuestionAnswering, BertForTokenClassification


class ElectraModel(BertModel):
    """BERT's encoder on tables embedding_size wide, projected where that is not hidden_size, without a pooler:
    last_hidden_state, hidden_states."""

    base_model_prefix = "electra"
    config_class = ElectraConfig

    def __init__(self, config: ElectraConfig, add_pooling_layer: bool = False):
        super().__init__(config, add_pooling_layer=False)
        if config.embedding_size != config.hidden_size:
            self.embeddings = BertEmbeddings(config, config.embedding_size)
            self.embeddings_project = nn.Linear(config.embedding_size, config.hidden_size)
            self.init_weights()


class ElectraPreTrainedModel(BertPreTrainedModel):
    """What ELECTRA's heads share: the config, and the encoder's class and name."""

    base_model_prefix = "electra"
    config_class = ElectraConfig
    encoder_class = ElectraModel


class ElectraGeneratorPredictions(nn.Module):
    """Dense onto embedding_size, GELU, LayerNorm."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.embedding_size)
        self.LayerNorm = nn.LayerNorm(config.embedding_size, eps=config.layer_norm_eps)

    def forward(self, x):
        return self.LayerNorm(F.gelu(self.dense(x)))


class ElectraLMHead(nn.Module):
    """Scores against the token table (tied: a checkpoint's `generator_lm_head.weight` is the table's other name)
    plus an output bias."""

    scores_vocabulary = True  # resize_token_embeddings resizes its bias with the table

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, x, embedding_weight):
        return F.linear(x, embedding_weight, self.bias)


class ElectraForMaskedLM(ElectraPreTrainedModel):
    """The masked LM: transformers' outputs, and `mlm_loss` (the loss under pre-training's name, outside tuples)."""

    output_bias = property(lambda self: self.generator_lm_head.bias)

    def __init__(self, config: ElectraConfig):
        super().__init__(config)
        self.electra = self.encoder_class(config)
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = ElectraLMHead(config)
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        """With labels (-100 = not predicted), only the masked positions are scored: logits [masked, V]."""
        enc = self.electra.encode(input_ids, attention_mask, token_type_ids, **inputs)
        logits, loss = masked_lm(lambda x, table: self.generator_lm_head(self.generator_predictions(x), table),
                                 self.word_embeddings.weight, enc, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states,
                      attentions=enc.attentions, mlm_loss=loss)


class ElectraClassificationHead(RobertaClassificationHead):
    """RoBERTa's sentence classifier with GELU (ELECTRA's authors' choice) for tanh."""

    activation = staticmethod(F.gelu)


class ElectraForSequenceClassification(ElectraPreTrainedModel, RobertaForSequenceClassification):
    """BERT's head and losses, reading the first token through the classifier's own dense layer and GELU."""

    def head_layer(self, config: ElectraConfig, num_outputs: int) -> nn.Module:
        return ElectraClassificationHead(config, num_outputs, self.dropout.p)


class ElectraForTokenClassification(ElectraPreTrainedModel, BertForTokenClassification):
    pass


class ElectraForQuestionAnswering(ElectraPreTrainedModel, BertForQuestionAnswering):
    pass


class ElectraSequenceSummary(nn.Module):
    """transformers' SequenceSummary as ELECTRA configures it: the first token's vector through a projection
    (`summary`, where summary_use_proj) and an activation (summary_activation); its dropout is the head's."""

    def __init__(self, config: ElectraConfig):
        super().__init__()
        self.summary = nn.Linear(config.hidden_size, config.hidden_size) if config.summary_use_proj else nn.Identity()
        self.activation = ACT[config.summary_activation] if config.summary_activation else nn.Identity()

    def forward(self, x):
        return self.activation(self.summary(x))


class ElectraForMultipleChoice(ElectraPreTrainedModel, BertForMultipleChoice):
    """A score per choice from the first token's sequence summary, after summary_last_dropout."""

    uses_pooler = False

    def head_layer(self, config: ElectraConfig, num_outputs: int) -> nn.Module:
        self.sequence_summary = ElectraSequenceSummary(config)
        self.dropout = nn.Dropout(config.summary_last_dropout)  # after the summary, as transformers' last dropout
        return super().head_layer(config, num_outputs)

    def head_input(self, enc):
        return self.sequence_summary(enc.pooled_tokens())
