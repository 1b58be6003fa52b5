"""Your own labelled texts: single texts or pairs, any label set, or scores.

Three task names: `text-classification` (a text, a label), `text-pair-classification` (two texts, a label) and
`regression` (one or two texts, a number). The splits are your own data's (own_data.py: files, a --data folder or
a `datasets` data set), the columns named by --text-column, --text-pair-column and --label-column. Labels may be
any strings or numbers (a number and its text are one class: 1, "1", 1.0 and "1.0"; an empty or NaN label is an
error): the label set is the training split's, two classes at least, sorted (numerically when every label is a
number), and saved in the model's config as id2label/label2id, so that `predict`, bertforge's pipelines and
transformers' `pipeline()` name them.
"""

import math
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import rounded, write_text_atomic
from .base import HeadClass, Split, TaskFamily, softmax
from .glue import GlueExample, encode_glue
from .metrics import accuracy, macro_f1, pearson, spearman
from .own_data import LABEL_FILES, SOURCES, OwnData, label_index, label_order, label_text, single_class


class TextClassificationFamily(OwnData, TaskFamily):
    names = ("text-classification", "text-pair-classification", "regression")
    model_class = HeadClass("BertForSequenceClassification")
    option_defaults = {**SOURCES, **LABEL_FILES, "text_column": "text", "text_pair_column": None,
                       "label_column": "label"}

    def __init__(self, task: str, data: Path | None, max_length: int, text_column="text", text_pair_column=None,
                 label_column="label", **sources):
        super().__init__(task, data, max_length)
        self.use_sources(**sources)
        self.regression = task == "regression"
        if task == "text-pair-classification" and text_pair_column is None:
            text_pair_column = "text_pair"
        self.columns = (text_column, text_pair_column, label_column)
        self.best_metric = "pearson" if self.regression else "accuracy"
        self.text_fields = {"text": str, **({"text_pair": str} if text_pair_column else {})}
        self.labels = ["score"] if self.regression else None  # classes: the training split's (see read)

    def text_records(self, split: str, labelled: bool) -> list[tuple[str, dict]]:
        text, pair, label = self.columns
        records = self.records(split, {"--text-column": text, "--text-pair-column": pair,
                                       "--label-column": label if labelled else None})
        for location, record in records:
            for column in (text, pair, label if labelled else None):
                if column is not None and not isinstance(record[column], (str, int, float)):
                    raise BertforgeError(f"{location}: {column!r} must be a text or a number")
        return records

    def read(self, split: str, tokenizer, limit=None) -> Split:
        text, pair, label = self.columns
        labelled = split != "test"
        records = self.text_records(split, labelled)
        if self.labels is None:  # the training split's label set, before any example is cut off by `limit`
            self.labels = label_order(label_text(r[label], location) for location, r in records)
            if split == "train":
                single_class(self.labels, self.source(split))
        examples = [GlueExample(f"{split}-{i}", str(r[text]), None if pair is None else str(r[pair]),
                                self.label_id(r[label], location) if labelled else None)
                    for i, (location, r) in enumerate(records[:limit])]
        return self.encode(split, examples, tokenizer)

    def use_model_labels(self, config) -> None:
        if not self.regression:
            super().use_model_labels(config)

    def label_id(self, value, location: str) -> int | float:
        if self.regression:
            try:
                score = float(value)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise BertforgeError(f"{location}: score {value!r} is not a number")
            return score
        return label_index(value, self.labels, location)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        return Split(name, examples, encode_glue(examples, tokenizer, self.max_length))

    def example(self, record: dict, guid: str) -> GlueExample:
        return GlueExample(guid, record["text"], record.get("text_pair"), None)

    def predictions(self, outputs) -> np.ndarray:
        logits = np.stack(outputs["logits"])
        return logits[:, 0] if self.regression else logits.argmax(-1)

    def score(self, split: Split, outputs) -> dict:
        preds, gold = self.predictions(outputs), np.array([e.label for e in split.examples])
        if self.regression:
            return {"pearson": pearson(preds, gold), "spearman": spearman(preds, gold)}
        return {"accuracy": accuracy(preds, gold), "macro_f1": macro_f1(preds, gold, len(self.labels))}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{split.name}_predictions.tsv"
        preds = self.predictions(outputs)
        rows = (f"{i}\t{float(p):.6g}\n" if self.regression else f"{i}\t{self.labels[int(p)]}\n"
                for i, p in enumerate(preds))
        write_text_atomic(path, "index\tprediction\n" + "".join(rows))
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        logits = np.stack(outputs["logits"])
        if self.regression:
            return [{"score": rounded(row[0])} for row in logits]
        return [{"label": self.labels[int(p.argmax())], "probabilities": dict(zip(self.labels, rounded(p)))}
                for p in softmax(logits)]
