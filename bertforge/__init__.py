"""bertforge: BERT from raw text to a served model.

The classes below are imported on first use (`bertforge.BertModel`), so that `import bertforge` and the
command line's `--help` do not load torch."""

import importlib
import os

from .core.version import __version__ as __version__
from .model.architectures.heads import HEADS
from .moved import forward_old_paths

# OpenMP threads that spin while waiting make every parallel region stall whenever another process holds a
# core: steps measured up to 10x slower on a shared 2-core machine. Sleeping threads cost little when alone.
# Takes effect only if torch is not imported yet; an explicit setting wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

forward_old_paths()  # bertforge.tokenizer, bertforge.model.BertForMaskedLM, ...: moved.py


# exported name -> the module that defines it
_EXPORTS = {
    "BertConfig": "model.architectures.config",
    **{name: head.module.removeprefix("bertforge.") for name, head in HEADS.items()},  # a class per head
    "BertTokenizer": "text.tokenizer",
    # transformers' Auto classes, each model class a head of HEADS
    **dict.fromkeys(["AutoConfig", "AutoTokenizer", "AutoModel", "AutoModelForPreTraining", "AutoModelForMaskedLM",
                     "AutoModelForSequenceClassification", "AutoModelForTokenClassification",
                     "AutoModelForQuestionAnswering", "AutoModelForMultipleChoice"], "model.auto"),
    "BertforgeError": "core.errors",
    "pipeline": "inference.pipelines",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'bertforge' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
