"""bertforge: BERT from raw text to a served model."""

import os

# OpenMP threads that spin while waiting make every parallel region stall whenever another process holds a
# core: steps measured up to 10x slower on a shared 2-core machine. Sleeping threads cost little when alone.
# Takes effect only if torch is not imported yet; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .config import BertConfig  # noqa: E402
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
from .pipelines import pipeline
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
    "pipeline",
]
