"""Multiple choice (SWAG, CommonsenseQA, OpenBookQA, ARC, COPA): readers, [num_choices] featurisation, and the
task family; and `multiple-choice`, the family of your own data's questions and choices on the same encoding."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import read_records, rounded, write_text_atomic
from ..inference.batches import SEQUENCE_INPUTS, pad_choices
from .base import HeadClass, Split, TaskFamily, find_file, softmax
from .metrics import accuracy
from .own_data import LABEL_FILES, SOURCES, OwnData, label_text, nested


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

    Examples are padded to the most choices among them as every batch is (inference.batches.pad_choices: a
    missing choice is one [PAD] token); "choice_mask" marks the real choices (1) so the model can ignore the
    rest. "labels" only when every example has one.
    """
    num_choices = max((len(e.endings) for e in examples), default=0)
    contexts = [e.context for e in examples for _ in e.endings]
    seconds = [" ".join(part for part in (e.question, ending) if part) for e in examples for ending in e.endings]
    enc = tokenizer(contexts, seconds, truncation=True, max_length=max_length, padding=False)
    starts = np.cumsum([0] + [len(e.endings) for e in examples]).tolist()
    rows = [pad_choices({k: list(enc[k][a:b]) for k in SEQUENCE_INPUTS}, num_choices, tokenizer.pad_token_id)
            for a, b in zip(starts, starts[1:])]
    features = {k: [row[k] for row in rows] for k in (*SEQUENCE_INPUTS, "choice_mask")}
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


# ---------------------------------------------------------------------------------------------------------
# Your own data


def choice_index(value, choices: list[str], location: str, keys: list[str] | None = None) -> int:
    """The right choice's index: a label that is one of the choices' keys (ARC's "A".."D" or "1".."4", given with
    the choices) or texts names it, else it is its index from 0."""
    if keys is not None and isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) in keys:
        return keys.index(str(value))
    if isinstance(value, str) and value in choices:
        return choices.index(value)
    if not isinstance(value, bool) and label_text(value, location) in [str(k) for k in range(len(choices))]:
        return int(label_text(value, location))
    named = f"the keys ({' | '.join(keys)}) nor " if keys is not None else ""
    raise BertforgeError(f"{location}: label {value!r} is not among {named}the choices ({' | '.join(choices)}) nor an "
                         f"index 0..{len(choices) - 1}")


class OwnMultipleChoiceFamily(OwnData, MultipleChoiceFamily):
    """Your own data's questions, each with its choices (--choices-columns: a column per choice, or one holding a
    list) and the right one (--label-column: its text or index). Laid out as CommonsenseQA, `[CLS] question [SEP]
    choice [SEP]`, or with --context-column as SWAG, `[CLS] context [SEP] question choice [SEP]`."""

    names = ("multiple-choice",)
    option_defaults = {**SOURCES, **LABEL_FILES, "question_column": "question", "context_column": None,
                       "choices_columns": ["choices"], "label_column": "label"}

    def __init__(self, task: str, data: Path | None, max_length: int, question_column="question",
                 context_column=None, choices_columns=("choices",), label_column="label", **sources):
        super().__init__(task, data, max_length)
        self.use_sources(**sources)
        self.columns = (question_column, context_column, list(choices_columns), label_column)
        self.text_fields = {**({"context": str} if context_column else {}), "question": str, "choices": list}

    def choices_of(self, record: dict, location: str) -> tuple[list[str], list[str] | None]:
        """The choices' texts, and their keys where the column holds them as Hugging Face's ARC does:
        {"text": [...], "label": ["A", "B", ...]} (named as the column or as its `.text`)."""
        columns = self.columns[2]
        values = record[columns[0]] if len(columns) == 1 else [record[c] for c in columns]
        keys = None
        if len(columns) == 1 and columns[0].endswith(".text") and nested(record, columns[0][:-5]):
            values = record[columns[0][:-5]]  # choices.text: its sibling choices.label holds the keys
        if isinstance(values, dict):
            if not isinstance(values.get("text"), list):
                raise BertforgeError(f"{location}: {columns[0]!r} holds an object with {', '.join(map(repr, values))}, "
                                     f"not {{\"text\": [choices], \"label\": [keys]}} (Hugging Face's ARC layout); "
                                     f"the ARC data sets themselves are the built-in task `arc`")
            values, keys = values["text"], values.get("label")
            if keys is not None and (not isinstance(keys, list) or len(keys) != len(values)):
                raise BertforgeError(f"{location}: {columns[0]!r}: \"label\" must list one key per choice")
        if (not isinstance(values, list) or len(values) < 2
                or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in values)):
            raise BertforgeError(f"{location}: the choices ({', '.join(map(repr, columns))}) must be at least 2 texts: "
                                 f"a column each (--choices-columns A B ...), or one column holding a list")
        return [str(v) for v in values], None if keys is None else [str(k) for k in keys]

    def read(self, split: str, tokenizer, limit=None) -> Split:
        question, context, choices, label = self.columns
        labelled = split != "test"
        examples = []
        located = self.records(split, {"--question-column": question, "--context-column": context,
                                       "--choices-columns": choices, "--label-column": label if labelled else None})
        for i, (location, record) in enumerate(located[:limit]):
            for column in (question, context):
                if column is not None and not isinstance(record[column], str):
                    raise BertforgeError(f"{location}: {column!r} must be a text")
            endings, keys = self.choices_of(record, location)
            answer = choice_index(record[label], endings, location, keys) if labelled else None
            first, second = (record[context], record[question]) if context else (record[question], "")
            examples.append(MultipleChoiceExample(f"{split}-{i}", first, second, endings, answer))
        return self.encode(split, examples, tokenizer)

    def example(self, record: dict, guid: str) -> MultipleChoiceExample:
        if "context" in self.text_fields:
            return MultipleChoiceExample(guid, record["context"], record["question"], record["choices"], None)
        return super().example(record, guid)
