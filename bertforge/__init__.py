"""bertforge: BERT from raw text to a served model."""

from .config import BertConfig
from .errors import BertforgeError
from .model import (
    BertForMaskedLM,
    BertForMultipleChoice,
    BertForPreTraining,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)
from .tokenizer import BertTokenizer

__version__ = "0.1.0"

__all__ = [
    "BertConfig",
    "BertForMaskedLM",
    "BertForMultipleChoice",
    "BertForPreTraining",
    "BertForQuestionAnswering",
    "BertForSequenceClassification",
    "BertForTokenClassification",
    "BertModel",
    "BertTokenizer",
    "BertforgeError",
]
