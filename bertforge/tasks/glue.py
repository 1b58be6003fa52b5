"""GLUE: the nine tasks' files (the layout of download_glue_data.py), featurisation, the submission file, and
the task family."""

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError, where
from ..core.io import read_text, rounded, write_text_atomic
from .base import HeadClass, Split, TaskFamily, softmax
from .metrics import GLUE_METRICS, glue_metrics


@dataclass(frozen=True)
class GlueTask:
    """One task: <data_dir>/<folder>/<split>.tsv, columns named by the file's header."""

    name: str
    folder: str
    text_a: str
    text_b: str | None
    label: str  # absent from the test splits, which have an index column instead
    labels: tuple[str, ...] | None  # as written in the files; None for regression (STS-B)
    hf_text: tuple[str, str | None]  # the same texts' fields in the `datasets` glue configs
    splits: tuple[str, ...] = ("train", "dev", "test")
    columns: tuple[str, ...] | None = None  # names for labelled files without a header (CoLA)
    names: tuple[str, ...] | None = None  # the labels' names where the files write 0/1 (`datasets`' glue features)

    @property
    def num_labels(self) -> int:
        return len(self.labels) if self.labels else 1

    def path(self, data_dir, split: str) -> Path:
        """The split's file: in `data_dir` itself where it holds the task's train.tsv (a folder of any name), else
        in the task's folder under it (download_glue_data.py's layout)."""
        data_dir = Path(data_dir)
        own = (data_dir / "train.tsv").is_file() or (data_dir / f"{split}.tsv").is_file()
        return data_dir / f"{split}.tsv" if own else data_dir / self.folder / f"{split}.tsv"


_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")

GLUE_TASKS = {t.name: t for t in [
    GlueTask("cola", "CoLA", "sentence", None, "label", _BINARY, ("sentence", None),
             columns=("source", "label", "original-label", "sentence"), names=("unacceptable", "acceptable")),
    GlueTask("sst2", "SST-2", "sentence", None, "label", _BINARY, ("sentence", None), names=("negative", "positive")),
    GlueTask("mrpc", "MRPC", "#1 String", "#2 String", "Quality", _BINARY, ("sentence1", "sentence2"),
             names=("not_equivalent", "equivalent")),
    GlueTask("stsb", "STS-B", "sentence1", "sentence2", "score", None, ("sentence1", "sentence2")),
    GlueTask("qqp", "QQP", "question1", "question2", "is_duplicate", _BINARY, ("question1", "question2"),
             names=("not_duplicate", "duplicate")),
    GlueTask("mnli", "MNLI", "sentence1", "sentence2", "gold_label", ("contradiction", "entailment", "neutral"),
             ("premise", "hypothesis"),
             splits=("train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched")),
    GlueTask("qnli", "QNLI", "question", "sentence", "label", _ENTAILMENT, ("question", "sentence")),
    GlueTask("rte", "RTE", "sentence1", "sentence2", "label", _ENTAILMENT, ("sentence1", "sentence2")),
    GlueTask("wnli", "WNLI", "sentence1", "sentence2", "label", _BINARY, ("sentence1", "sentence2"),
             names=("not_entailment", "entailment")),
]}


@dataclass
class GlueExample:
    guid: str  # "<split>-<n>", n counting records from 0 (the test files' index)
    text_a: str
    text_b: str | None
    label: int | float | None  # index into the task's labels, a score for stsb, None on test splits


def glue_task(name: str, split: str | None = None) -> GlueTask:
    task = GLUE_TASKS.get(name)
    if task is None:
        raise BertforgeError(f"unknown GLUE task {name!r}: expected one of {', '.join(GLUE_TASKS)}")
    if split is not None and split not in task.splits:
        raise BertforgeError(f"GLUE {name} has no split {split!r}: expected one of {', '.join(task.splits)}")
    return task


def _parse_label(task: GlueTask, value: str, path, line: int) -> int | float:
    if task.labels is None:
        try:
            return float(value)
        except ValueError:
            raise BertforgeError(f"{where(path, line)}: score {value!r} is not a number") from None
    if value not in task.labels:
        raise BertforgeError(f"{where(path, line)}: label {value!r} is not one of {', '.join(task.labels)}")
    return task.labels.index(value)


def read_glue(task: str, data_dir, split: str) -> list[GlueExample]:
    """Read one split of a GLUE task from the standard layout. Test splits give label None."""
    t = glue_task(task, split)
    path = t.path(data_dir, split)
    if not path.is_file():
        raise BertforgeError(f"{path}: no such file (expected the layout of download_glue_data.py)")
    labelled = not split.startswith("test")
    examples = []
    # utf-8-sig drops MRPC's byte-order mark; QUOTE_NONE because quotes in the texts are literal (STS-B dev).
    text = io.StringIO(read_text(path, "utf-8-sig"), newline="")
    rows = csv.reader(text, delimiter="\t", quoting=csv.QUOTE_NONE)
    header = t.columns if labelled and t.columns else next(rows, [])
    if not header:
        raise BertforgeError(f"{path}: empty file")
    wanted = [c for c in (t.text_a, t.text_b, t.label if labelled else None) if c is not None]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise BertforgeError(f"{where(path, 1)}: header lacks column {', '.join(map(repr, missing))}")
    a, b, y = (header.index(c) if c in wanted else None for c in (t.text_a, t.text_b, t.label))
    for row in rows:
        if not row:
            continue
        if len(row) != len(header):
            raise BertforgeError(f"{where(path, rows.line_num)}: expected {len(header)} columns, found {len(row)}")
        label = _parse_label(t, row[y], path, rows.line_num) if labelled else None
        examples.append(GlueExample(f"{split}-{len(examples)}", row[a], None if b is None else row[b], label))
    if not examples:
        raise BertforgeError(f"{path}: no examples")
    return examples


def load_glue_from_datasets(task: str, split: str) -> list[GlueExample]:
    """The same examples from the Hugging Face `datasets` hub copy (needs `datasets` and a network or cache)."""
    t = glue_task(task, split)
    try:
        import datasets
    except ImportError:
        raise BertforgeError("load_glue_from_datasets needs the `datasets` package (or read the TSV files with "
                             "read_glue)") from None
    data = datasets.load_dataset("nyu-mll/glue", t.name, split=split.replace("dev", "validation"))
    to_ours = None
    if t.labels is not None:
        names = data.features["label"].names
        # MNLI, QNLI and RTE are stored by class name, in an order that differs from the files' for MNLI;
        # the 0/1 tasks' ids are the files' values already.
        to_ours = [t.labels.index(n) for n in names] if set(names) == set(t.labels) else list(range(len(names)))
    text_a, text_b = t.hf_text
    examples = []
    for i, row in enumerate(data):
        label = row["label"]
        if label == -1:  # unlabelled test split
            label = None
        elif to_ours is not None:
            label = to_ours[label]
        else:
            label = float(label)
        examples.append(GlueExample(f"{split}-{i}", row[text_a], row[text_b] if text_b else None, label))
    return examples


def encode_glue(examples: list[GlueExample], tokenizer, max_length: int) -> dict[str, list]:
    """Token ids for [CLS] a [SEP] (b [SEP]), unpadded; "labels" only when every example has one."""
    pairs = [e.text_b for e in examples] if examples and examples[0].text_b is not None else None
    enc = tokenizer([e.text_a for e in examples], pairs, truncation=True, max_length=max_length, padding=False)
    features = {k: list(enc[k]) for k in ("input_ids", "token_type_ids", "attention_mask")}
    if all(e.label is not None for e in examples):
        features["labels"] = [e.label for e in examples]
    return features


def write_glue_submission(task: str, predictions, path) -> None:
    """Write gluebenchmark.com's `index<TAB>prediction` file from label ids (scores for stsb), in test order."""
    t = glue_task(task)
    rows = (f"{i}\t{float(p):.3f}\n" if t.labels is None else f"{i}\t{t.labels[int(p)]}\n"
            for i, p in enumerate(predictions))
    write_text_atomic(path, "index\tprediction\n" + "".join(rows))


class GlueFamily(TaskFamily):
    """The nine GLUE tasks: a sequence classifier (a regressor for STS-B) on the pooled output. Its labels are the
    tasks' names (SST-2 negative, positive), which fine-tuning writes in config.json's id2label; the submission
    file keeps the files' values. A model whose label names all mean the task's (label_aliases: the names, the
    files' values as models fine-tuned before label names have them, transformers' LABEL_i) is read in the task's
    order; one with other names keeps them, its outputs taken in the task's order."""

    names = tuple(GLUE_TASKS)
    model_class = HeadClass("BertForSequenceClassification")

    def __init__(self, task: str, data: Path | None, max_length: int):
        super().__init__(task, data, max_length)
        self.glue = glue_task(task)
        self.labels = list(self.glue.names or self.glue.labels or [self.glue.name])
        self.order = None  # the model's output of each label, where its label names are in another order
        self.best_metric = GLUE_METRICS[task][0]
        self.eval_splits = ("dev_matched", "dev_mismatched") if task == "mnli" else ("dev",)
        self.text_fields = {name: str for name in self.glue.hf_text if name}

    def read(self, split: str, tokenizer, limit=None) -> Split:
        return self.encode(split, read_glue(self.glue.name, self.data, split)[:limit], tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        return Split(name, examples, encode_glue(examples, tokenizer, self.max_length))

    def example(self, record: dict, guid: str) -> GlueExample:
        a, b = self.glue.hf_text
        return GlueExample(guid, record[a], record[b] if b else None, None)

    def label_aliases(self, i: int) -> set[str]:
        return super().label_aliases(i) | ({self.glue.labels[i].lower()} if self.glue.labels else set())

    def use_model_labels(self, config) -> None:
        self.order = self.model_order(config) if self.glue.labels else None
        if self.order is None:
            super().use_model_labels(config)

    def logits(self, outputs) -> np.ndarray:
        logits = np.stack(outputs["logits"])
        return logits if self.order is None else logits[:, self.order]

    def predictions(self, outputs) -> np.ndarray:
        logits = self.logits(outputs)
        return logits[:, 0] if self.glue.labels is None else logits.argmax(-1)

    def score(self, split: Split, outputs) -> dict:
        metrics = glue_metrics(self.glue.name, self.predictions(outputs), np.array([e.label for e in split.examples]))
        suffix = "_mismatched" if split.name == "dev_mismatched" else ""
        return {f"{k}{suffix}": v for k, v in metrics.items()}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{self.glue.folder}_{split.name}.tsv"
        write_glue_submission(self.glue.name, self.predictions(outputs), path)
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        logits = self.logits(outputs)
        if self.glue.labels is None:
            return [{"score": rounded(row[0])} for row in logits]
        return [{"label": self.labels[int(p.argmax())], "probabilities": dict(zip(self.labels, rounded(p)))}
                for p in softmax(logits)]
