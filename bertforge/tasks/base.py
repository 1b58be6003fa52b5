"""The interface a task family declares, and all that generic code (fine-tuning, evaluation, prediction,
pipelines) may know of a task.

A family (GLUE, CoNLL NER, SQuAD, multiple choice, ...) lives entirely in its own `tasks/<family>.py` as one
`TaskFamily` subclass and is registered by one line in `tasks/__init__.py`. It reads a split into examples
and encoded rows, declares its model class, the batch keys with their padding, which outputs are per token,
its head's labels and options, and turns the model's outputs into metrics, submission files and
JSON-ready predictions.
"""

import importlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..inference.batches import SEQUENCE_INPUTS
from ..model.architectures.heads import head_class



class HeadClass:
    """A family's `model_class`, named here and imported from its module on first use (a declared head's from the
    module `heads.HEADS` names, another class's from `module`): the task registry stays free of torch, so that
    the commands' --help does not load it."""

    def __init__(self, name: str, module: str | None = None):
        self.name, self.module = name, module

    def __get__(self, obj, owner=None) -> type:
        if self.module is None:
            return head_class(self.name)
        return getattr(importlib.import_module(self.module), self.name)


def head_name(family: type) -> str:
    """The name of a family's head class, without importing it."""
    declared = inspect.getattr_static(family, "model_class")
    return declared.name if isinstance(declared, HeadClass) else declared.__name__


@dataclass
class Split:
    """A split's examples and their encoded rows: `encoded[key][row]`, a row per model input (a long example
    may take several rows); `extra` holds what the family needs to map rows back to examples."""

    name: str
    examples: list
    encoded: dict[str, list]
    extra: dict = field(default_factory=dict)


class TaskFamily:
    """Base class of the task families. Subclasses set the class attributes and implement the methods."""

    names: tuple[str, ...] = ()  # the task names it answers to, e.g. ("sst2", "mrpc", ...)
    model_class: type  # a head class: HeadClass("BertFor...")
    output_keys: tuple[str, ...] = ("logits",)  # the model outputs it reads
    per_token_outputs: tuple[str, ...] = ()  # those with a value per token: cut to each row's length
    # Batch keys and their padding: a number pads the key's last axis to the longest row, None stacks as is.
    inputs: dict = SEQUENCE_INPUTS  # what the model reads at inference
    targets: dict = {"labels": None}  # what training adds
    default_max_length = 128
    best_metric: str  # the evaluation figure that picks the best epoch (higher is better)
    eval_splits: tuple[str, ...] = ("dev",)
    # Fields of an example given as plain text (predict --text/--input, pipelines): name -> str, or list for a
    # field holding several texts (the rest of a tab-separated line).
    text_fields: dict[str, type] = {}
    option_defaults: dict = {}  # the family's own options (command-line flags of finetune/evaluate/predict)
    reads_data_folder = True  # its splits come from --data (else from its own options)
    progress = True  # reading may show the progress bars of the libraries it uses (datasets')
    labels: list[str]  # the head's label names, in output order

    def __init__(self, task: str, data: Path | None, max_length: int, **options):
        self.task, self.data, self.max_length = task, data, max_length

    @classmethod
    def add_arguments(cls, parser) -> None:
        """Declare the family's own options (the names in `option_defaults`)."""

    # Reading and encoding
    def read(self, split: str, tokenizer, limit: int | None = None) -> Split:
        raise NotImplementedError

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        raise NotImplementedError

    def example(self, record: dict, guid: str):
        """An example from plain-text fields (`text_fields`), for prediction."""
        raise NotImplementedError

    # The head
    def head_config(self) -> dict:
        """Config fields of the head to build for fine-tuning."""
        return {"id2label": dict(enumerate(self.labels))}

    def predicts_test(self) -> bool:
        """Whether fine-tuning ends by predicting the test split with the best model (your own data's, if given)."""
        return False

    def config_entries(self) -> dict:
        """What the fine-tuned model's config.json keeps for the family beside the BertConfig fields (in
        `config.extra`), for `use_model_labels` to read back."""
        return {}

    def use_model_labels(self, config) -> None:
        """Take a fine-tuned model's label names: always without data, else when there are as many."""
        if self.data is None or config.num_labels == len(self.labels):
            self.labels = [config.id2label[i] for i in range(config.num_labels)]

    def label_aliases(self, i: int) -> set[str]:
        """What a model's id2label may call label i (lower-cased): its name, or transformers' LABEL_i."""
        return {str(self.labels[i]).lower(), f"label_{i}"}

    def model_order(self, config) -> list[int] | None:
        """The model's output of each of the family's labels, where each of the model's label names means one of
        them (label_aliases); None where one does not."""
        if config.num_labels != len(self.labels):
            return None
        order = {}
        for output in range(config.num_labels):
            name = str(config.id2label[output]).lower()
            means = [i for i in range(len(self.labels)) if name in self.label_aliases(i)]
            if len(means) != 1 or means[0] in order:
                return None
            order[means[0]] = output
        return [order[i] for i in range(len(self.labels))]

    def loss_units(self, batch: dict) -> int:
        """How many units the batch's mean loss is over (rows, unless the loss is per token)."""
        return len(batch["input_ids"])

    # Outputs
    def score(self, split: Split, outputs: dict[str, list[np.ndarray]]) -> dict[str, float]:
        raise NotImplementedError

    def write(self, split: Split, outputs, folder: Path) -> Path:
        """The submission (or predictions) file of a split; returns its path."""
        raise NotImplementedError

    def describe(self, split: Split, outputs) -> list[dict]:
        """One JSON-ready prediction per example."""
        raise NotImplementedError


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def find_file(folder: Path, patterns: tuple[str, ...], what: str) -> Path:
    for pattern in patterns:
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
    raise BertforgeError(f"{folder}: no {what} file (looked for {', '.join(patterns)})")
