"""Multiple choice (SWAG, CommonsenseQA, OpenBookQA, ARC, COPA): readers, [num_choices] featurisation, and the
task family."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import BertforgeError
from ..io import read_records, rounded, write_text_atomic
from .base import SEQUENCE_INPUTS, HeadClass, Split, TaskFamily, find_file, softmax
from .metrics import accuracy


@dataclass
class MultipleChoiceExample:
    guid: str
    context: str  # the first segment
    question: str  # put before each ending in the second segment; "" when there is none
    endings: list[str]
    label: int | None  # index into endings; None when unlabelled


def _label(value, num_choices: int) -> int | None:
    if value in (None, "", -1, "-1"):  # unlabelled (COPA's test split writes -1)
        return None
    if str(value) not in [str(k) for k in range(num_choices)]:
        raise ValueError(f"label {value!r} is not one of 0..{num_choices - 1}")
    return int(value)


def _swag(record: dict, guid: str) -> MultipleChoiceExample:
    endings = [record[f"ending{k}"] for k in range(4)]
    return MultipleChoiceExample(guid, record["sent1"], record["sent2"], endings, _label(record.get("label"), 4))


def _qa(record: dict, guid: str) -> MultipleChoiceExample:
    """CommonsenseQA, OpenBookQA and ARC, in the official layout or the Hugging Face export."""
    question = record["question_stem"] if "question_stem" in record else record["question"]
    if isinstance(question, dict):  # official: question {stem, choices [{label, text}]}, answerKey
        keys = [c["label"] for c in question["choices"]]
        endings = [c["text"] for c in question["choices"]]
        question = question["stem"]
    else:  # Hugging Face: question (question_stem for OpenBookQA), choices {text: [...], label: [...]}, answerKey
        keys, endings = record["choices"]["label"], record["choices"]["text"]
    answer = record.get("answerKey") or None
    if answer is not None and answer not in keys:
        raise ValueError(f"answerKey {answer!r} is not one of the choice labels {', '.join(keys)}")
    # ARC keys are letters or digits; the label is the answer's position either way.
    return MultipleChoiceExample(guid, question, "", endings, None if answer is None else keys.index(answer))


_COPA_QUESTIONS = {"cause": "What was the cause?", "effect": "What was the effect?"}


def _copa(record: dict, guid: str) -> MultipleChoiceExample:
    if record["question"] not in _COPA_QUESTIONS:
        raise ValueError(f"question {record['question']!r} is not cause or effect")
    endings = [record["choice1"], record["choice2"]]
    question = _COPA_QUESTIONS[record["question"]]
    return MultipleChoiceExample(guid, record["premise"], question, endings, _label(record.get("label"), 2))


# task -> parser of one record
MULTIPLE_CHOICE_TASKS = {"swag": _swag, "commonsenseqa": _qa, "openbookqa": _qa, "arc": _qa, "copa": _copa}


def read_multiple_choice(task: str, path) -> list[MultipleChoiceExample]:
    """Read a task's file: SWAG as its CSV or as JSON lines, the others as JSON lines."""
    if task not in MULTIPLE_CHOICE_TASKS:
        known = ", ".join(MULTIPLE_CHOICE_TASKS)
        raise BertforgeError(f"unknown multiple-choice task {task!r}: expected one of {known}")
    path = Path(path)
    records = read_records(path)
    examples = []
    for location, record in records:
        guid = str(record.get("id", record.get("idx", len(examples))))
        try:
            examples.append(MULTIPLE_CHOICE_TASKS[task](record, guid))
        except KeyError as e:
            raise BertforgeError(f"{location}: missing field {e}") from None
        except ValueError as e:
            raise BertforgeError(f"{location}: {e}") from None
    if not examples:
        raise BertforgeError(f"{path}: no examples")
    return examples


def encode_multiple_choice(examples: list[MultipleChoiceExample], tokenizer, max_length: int) -> dict[str, list]:
    """Per example, one `[CLS] context [SEP] question ending [SEP]` sequence per choice (unpadded tokens).

    Examples are padded with empty endings to the most choices among them; "choice_mask" marks the real
    choices (1) so the model can ignore the rest. "labels" only when every example has one.
    """
    num_choices = max((len(e.endings) for e in examples), default=0)
    contexts, seconds = [], []
    for e in examples:
        for ending in e.endings + [""] * (num_choices - len(e.endings)):
            contexts.append(e.context)
            seconds.append(" ".join(part for part in (e.question, ending) if part))
    enc = tokenizer(contexts, seconds, truncation=True, max_length=max_length, padding=False)
    features = {
        k: [list(enc[k][i * num_choices : (i + 1) * num_choices]) for i in range(len(examples))]
        for k in ("input_ids", "token_type_ids", "attention_mask")
    }
    features["choice_mask"] = [[int(c < len(e.endings)) for c in range(num_choices)] for e in examples]
    if all(e.label is not None for e in examples):
        features["labels"] = [e.label for e in examples]
    return features


class MultipleChoiceFamily(TaskFamily):
    """One score per choice from the pooled output, softmax across the choices; accuracy."""

    names = tuple(MULTIPLE_CHOICE_TASKS)
    model_class = HeadClass("BertForMultipleChoice")
    inputs = {**SEQUENCE_INPUTS, "choice_mask": None}
    best_metric = "accuracy"
    patterns = {"train": ("train*.jsonl", "train*.csv", "train*.json"),
                "dev": ("dev*.jsonl", "validation*.jsonl", "val*.csv", "dev*.csv", "val*.json", "dev*.json"),
                "test": ("test*.jsonl", "test*.csv", "test*.json")}
    text_fields = {"question": str, "choices": list}
    labels = ["choice"]

    def read(self, split: str, tokenizer, limit=None) -> Split:
        path = self.data if self.data.is_file() else find_file(self.data, self.patterns[split], split)
        return self.encode(split, read_multiple_choice(self.task, path)[:limit], tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        return Split(name, examples, encode_multiple_choice(examples, tokenizer, self.max_length))

    def example(self, record: dict, guid: str) -> MultipleChoiceExample:
        # laid out as CommonsenseQA, OpenBookQA and ARC are: [CLS] question [SEP] choice [SEP]
        return MultipleChoiceExample(guid, record["question"], "", record["choices"], None)

    def use_model_labels(self, config) -> None:
        pass  # one score per choice: there are no label names

    def score(self, split: Split, outputs) -> dict:
        preds = np.stack(outputs["logits"]).argmax(-1)
        return {"accuracy": accuracy(preds, [e.label for e in split.examples])}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{self.task}_{split.name}_predictions.jsonl"
        preds = np.stack(outputs["logits"]).argmax(-1)
        write_text_atomic(path, "".join(json.dumps({"id": e.guid, "prediction": int(p)}) + "\n"
                                        for e, p in zip(split.examples, preds)))
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        probabilities = [softmax(logits[:len(e.endings)]) for e, logits in zip(split.examples, outputs["logits"])]
        return [{"prediction": int(p.argmax()), "probabilities": rounded(p)} for p in probabilities]
