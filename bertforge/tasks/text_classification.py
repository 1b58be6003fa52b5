"""Your own labelled texts: single texts or pairs from CSV, TSV or JSON lines, any label set, or scores.

Three task names: `text-classification` (a text, a label), `text-pair-classification` (two texts, a label) and
`regression` (one or two texts, a number). The files are named by --train, --dev and --test (or by --data, a
folder holding train.*, dev.* and test.* in one of the formats), the columns by --text-column,
--text-pair-column and --label-column. Labels may be any strings or numbers: the label set is the training
file's, sorted (numerically when every label is a number), and saved in the model's config as
id2label/label2id, so that `predict`, bertforge's pipelines and transformers' `pipeline()` name them.
"""

from pathlib import Path

import numpy as np

from ..errors import BertforgeError
from ..io import read_records, rounded, write_text_atomic
from .base import HeadClass, Split, TaskFamily, find_file, softmax
from .glue import GlueExample, encode_glue
from .metrics import accuracy, macro_f1, pearson, spearman

SUFFIXES = ("csv", "tsv", "jsonl", "json")


def label_order(values) -> list[str]:
    """The distinct labels, sorted as numbers when they all are, else as text."""
    distinct = sorted(set(values))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


class TextClassificationFamily(TaskFamily):
    names = ("text-classification", "text-pair-classification", "regression")
    model_class = HeadClass("BertForSequenceClassification")
    reads_data_folder = False
    option_defaults = {"train": None, "dev": None, "test": None, "text_column": "text", "text_pair_column": None,
                       "label_column": "label"}

    def __init__(self, task: str, data: Path | None, max_length: int, train=None, dev=None, test=None,
                 text_column="text", text_pair_column=None, label_column="label"):
        super().__init__(task, data, max_length)
        self.files = {"train": train, "dev": dev, "test": test}
        self.regression = task == "regression"
        if task == "text-pair-classification" and text_pair_column is None:
            text_pair_column = "text_pair"
        self.columns = (text_column, text_pair_column, label_column)
        self.best_metric = "pearson" if self.regression else "accuracy"
        self.text_fields = {"text": str, **({"text_pair": str} if text_pair_column else {})}
        self.labels = ["score"] if self.regression else None  # classes: the training file's (see read)

    @classmethod
    def add_arguments(cls, parser) -> None:
        group = parser.add_argument_group("your own data (text-classification, text-pair-classification, regression)")
        group.add_argument("--train", help="training file: .csv, .tsv (with a header) or .jsonl")
        group.add_argument("--dev", help="evaluation file, in the same format")
        group.add_argument("--test", help="file to predict (labels not needed)")
        group.add_argument("--text-column", default="text", help="column of the text")
        group.add_argument("--text-pair-column",
                           help="column of the second text of a pair (default text_pair for text-pair-classification)")
        group.add_argument("--label-column", default="label", help="column of the label or score")

    def path(self, split: str) -> Path:
        """The split's file: named by its flag, or found in the --data folder."""
        if self.files.get(split):
            return Path(self.files[split])
        if self.data is not None and self.data.is_dir():
            return find_file(self.data, tuple(f"{split}.{s}" for s in SUFFIXES), split)
        raise BertforgeError(f"{self.task} needs --{split} FILE (or --data, a folder holding {split}.csv/.tsv/.jsonl)")

    def records(self, split: str, labelled: bool) -> list[tuple[str, dict]]:
        text, pair, label = self.columns
        records = list(read_records(self.path(split)))
        if not records:
            raise BertforgeError(f"{self.path(split)}: no examples")
        for location, record in records:
            for column in (text, pair, label if labelled else None):
                if column is not None and column not in record:
                    raise BertforgeError(f"{location}: no column {column!r} (see --text-column, --text-pair-column, "
                                         f"--label-column)")
                if column is not None and not isinstance(record[column], (str, int, float)):
                    raise BertforgeError(f"{location}: {column!r} must be a text or a number")
        return records

    def read(self, split: str, tokenizer, limit=None) -> Split:
        text, pair, label = self.columns
        labelled = split != "test"
        records = self.records(split, labelled)
        if self.labels is None:  # the training file's label set, before any example is cut off by `limit`
            self.labels = label_order(str(r[label]) for _, r in records)
        examples = [GlueExample(f"{split}-{i}", str(r[text]), None if pair is None else str(r[pair]),
                                self.label_id(r[label], location) if labelled else None)
                    for i, (location, r) in enumerate(records[:limit])]
        return self.encode(split, examples, tokenizer)

    def use_model_labels(self, config) -> None:
        if not self.regression:  # the fine-tuned head's labels, in its output order
            self.labels = [config.id2label[i] for i in range(config.num_labels)]

    def label_id(self, value, location: str) -> int | float:
        if self.regression:
            try:
                return float(value)
            except ValueError:
                raise BertforgeError(f"{location}: score {value!r} is not a number") from None
        if str(value) not in self.labels:
            raise BertforgeError(f"{location}: label {value!r} is not among the training file's "
                                 f"({', '.join(self.labels)})")
        return self.labels.index(str(value))

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
