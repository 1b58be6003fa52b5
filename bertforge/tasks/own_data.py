"""Your own data, for the families that fine-tune on it (text classification, token classification, question
answering, multiple choice, reranking): where a split comes from, its records with their locations, the label set,
and the command-line flags of them all, declared once.

A split is a file (--train, --dev, --test: CSV or TSV with a header row, JSON lines, or one JSON array in a
.json file), a file in a --data folder (train.*, dev.*, test.*), or a split of a Hugging Face `datasets` data set
(--dataset NAME[:CONFIG]: a folder written by `save_to_disk`, a folder of data files, or a name that
`datasets.load_dataset` knows; its train, validation (or dev) and test splits). A record comes with its location,
`file:line` or `NAME[split][row]`, for one-line errors. In a data set, class ids (`ClassLabel` columns and lists of
them) are read as their names. The labels of a split's file may come from a file of their own (--train-labels,
--dev-labels: a label a line, the records' order, as PIQA's train-labels.lst), for the families with a
--label-column (LABEL_FILES).
"""

import math
import numbers
from pathlib import Path

from ..core.errors import BertforgeError, where
from ..core.io import read_records, read_text
from .base import find_file

SOURCES = {"train": None, "dev": None, "test": None, "dataset": None}  # the options naming the splits
SUFFIXES = ("csv", "tsv", "jsonl", "json")
LABEL_FILES = {"train_labels": None, "dev_labels": None}  # a split's labels in a file of their own, a line each
DATASET_SPLITS = {"train": ("train",), "dev": ("validation", "dev", "valid"), "test": ("test",)}


def label_text(value, location: str, what: str = "label") -> str:
    """A label as its user means it, one rule for CSV, JSON lines and data sets: a number and its text are one
    class (1, "1", 1.0 and "1.0" are all "1"); an empty label, a NaN or an infinity is an error naming its location."""
    if isinstance(value, str):
        if not value.strip():
            raise BertforgeError(f"{location}: the {what} is empty")
        try:
            number = float(value)
        except ValueError:
            return value
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = value
    else:
        return str(value)
    if not math.isfinite(number):
        raise BertforgeError(f"{location}: {what} {value!r} is not a class (a NaN or an infinity: a missing value?)")
    if isinstance(number, numbers.Integral) or float(number).is_integer():
        return str(int(number))
    return repr(float(number))


def label_order(values) -> list[str]:
    """The distinct labels, sorted as numbers when they all are, else as text."""
    distinct = sorted(set(values))
    try:
        return sorted(distinct, key=float)
    except ValueError:
        return distinct


def same_label(label: str) -> str:
    """A label of a label set (a model's may come from before label_text) as label_text reads it."""
    try:
        return label_text(label, "")
    except BertforgeError:
        return label


def label_index(value, labels: list[str], location: str, what: str = "label") -> int:
    """The index of a record's label in the label set (the training split's, or the model's)."""
    key = label_text(value, location, what)
    for i, label in enumerate(labels):
        if label == key or same_label(label) == key:
            return i
    raise BertforgeError(f"{location}: {what} {value!r} is not among the training split's ({', '.join(labels)})")


def single_class(labels: list[str], source, what: str = "class") -> None:
    """A training split must hold two classes at least: a classifier of one learns nothing."""
    if len(labels) < 2:
        raise BertforgeError(f"{source}: the training split has a single {what} ({', '.join(labels)}); a classifier "
                             f"needs two at least")


def load_dataset_splits(spec: str, progress: bool = True) -> dict:
    """The splits (name -> `datasets.Dataset`) of --dataset NAME[:CONFIG]; `progress`: show datasets' bars."""
    try:
        import datasets
    except ImportError:
        raise BertforgeError("--dataset needs the `datasets` package: pip install 'bertforge[datasets]'") from None
    name, config = (spec, None) if Path(spec).exists() or ":" not in spec else spec.rsplit(":", 1)
    saved = Path(name) / "dataset_dict.json", Path(name) / "state.json"  # what save_to_disk writes
    shown = datasets.is_progress_bar_enabled()
    if not progress:
        datasets.disable_progress_bars()
    try:
        if any(p.is_file() for p in saved):
            if config:
                raise BertforgeError(f"--dataset {spec}: a folder written by save_to_disk has no configurations")
            loaded = datasets.load_from_disk(name)
        else:
            loaded = datasets.load_dataset(name, config)
    except (OSError, ValueError) as e:  # not found, offline, no such configuration, unreadable files
        raise BertforgeError(f"--dataset {spec}: {str(e).strip().splitlines()[0]}") from None
    finally:
        if shown:
            datasets.enable_progress_bars()
    return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}


def class_names(feature):
    """A function turning a column's class ids into their names (None for -1, unlabelled), or None when the
    column holds no `ClassLabel`."""
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return lambda value: None if value is None or value < 0 else feature.int2str(value)
    inner = getattr(feature, "feature", None)  # a List (Sequence) column
    if isinstance(inner, datasets.ClassLabel):
        return lambda values: [inner.int2str(v) for v in values]
    return None


def dataset_records(spec: str, splits: dict, split: str) -> list[tuple[str, dict]]:
    names = [n for n in DATASET_SPLITS[split] if n in splits]
    if not names:
        raise BertforgeError(f"--dataset {spec}: no {' or '.join(DATASET_SPLITS[split])} split (it has "
                             f"{', '.join(splits)})")
    data = splits[names[0]]
    named = {}
    for column, feature in data.features.items():
        if (to_names := class_names(feature)) is not None:
            named[column] = to_names
    return [(f"{spec}[{names[0]}][{i}]", {**row, **{c: f(row[c]) for c, f in named.items()}})
            for i, row in enumerate(data)]


def nested(record: dict, path: str) -> bool:
    """A dotted column name (`choices.text`) found in a record's nested objects is added to it under that name;
    whether it was."""
    value = record
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    record[path] = value
    return True


def with_labels(located: list, path: Path, column: str, source: str) -> list[tuple[str, dict]]:
    """The records `located` with their labels, under `column`, from `path`: a label a line, one line per record in
    their order (blank lines at the end aside). Each record's location names its label's line as well."""
    lines = read_text(path, "utf-8-sig").split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) != len(located):
        raise BertforgeError(f"{path}: {len(lines)} labels for the {len(located)} records of {source} (a labels file "
                             f"holds one label a line, a line per record, in their order)")
    labelled = []
    for n, ((location, record), line) in enumerate(zip(located, lines), 1):
        if not line.strip():
            raise BertforgeError(f"{where(path, n)}: the label is empty (the label of {location})")
        labelled.append((f"{location} (label: {where(path, n)})", {**record, column: line.strip()}))
    return labelled


class OwnData:
    """What a family of your own data adds to its TaskFamily (a mixin, first among the bases): its splits come
    from the SOURCES options (`use_sources`), evaluation is on dev, the flags are `add_arguments`'."""

    reads_data_folder = False
    eval_splits = ("dev",)

    def use_sources(self, train=None, dev=None, test=None, dataset=None, train_labels=None, dev_labels=None) -> None:
        self.files, self.dataset, self._dataset_splits = {"train": train, "dev": dev, "test": test}, dataset, None
        self.label_files = {"train": train_labels, "dev": dev_labels}
        if dataset is not None and (self.data is not None or any(self.files.values())):
            raise BertforgeError("--dataset: give a data set or files (--train, --dev, --test, --data), not both")
        if dataset is not None and any(self.label_files.values()):
            raise BertforgeError("--train-labels, --dev-labels: a labels file goes with a file (--train, --dev or "
                                 "--data), not with --dataset")

    def path(self, split: str) -> Path:
        """The split's file: named by its flag, or found in the --data folder."""
        if self.files.get(split):
            return Path(self.files[split])
        if self.data is not None and self.data.is_dir():
            return find_file(self.data, tuple(f"{split}.{s}" for s in SUFFIXES), split)
        raise BertforgeError(f"{self.task} needs --{split} FILE (or --data, a folder holding {split}.csv/.tsv/.jsonl, "
                             f"or --dataset NAME)")

    def predicts_test(self) -> bool:
        if self.dataset is not None:
            return any(name in self.dataset_splits() for name in DATASET_SPLITS["test"])
        in_folder = self.data is not None and any((self.data / f"test.{s}").is_file() for s in SUFFIXES)
        return bool(self.files["test"]) or in_folder

    def dataset_splits(self) -> dict:
        if self._dataset_splits is None:
            self._dataset_splits = load_dataset_splits(self.dataset, self.progress)
        return self._dataset_splits

    def source(self, split: str) -> str:
        """Where the split comes from, for errors: its file, or the data set and split."""
        return str(self.path(split)) if self.dataset is None else f"--dataset {self.dataset}, split {split}"

    def records(self, split: str, columns: dict) -> list[tuple[str, dict]]:
        """The split's (location, record) pairs; every record holds the `columns` (flag -> a column name, a list
        of names, or None for none)."""
        source = self.source(split)
        if self.dataset is None:
            located = list(read_records(self.path(split)))
        else:
            located = dataset_records(self.dataset, self.dataset_splits(), split)
        if not located:
            raise BertforgeError(f"{source}: no examples")
        if self.label_files.get(split) and columns.get("--label-column"):
            located = with_labels(located, Path(self.label_files[split]), columns["--label-column"], source)
        for location, record in located:
            for flag, names in columns.items():
                for name in [names] if isinstance(names, str) else names or ():
                    if name not in record and not nested(record, name):
                        raise BertforgeError(f"{location}: no column {name!r} (see {flag}; the columns are "
                                             f"{', '.join(map(str, record))})")
        return located

    def use_model_labels(self, config) -> None:
        """The fine-tuned head's labels, in its output order (the training split's when it was fine-tuned)."""
        self.labels = [config.id2label[i] for i in range(config.num_labels)]

    @classmethod
    def add_arguments(cls, parser) -> None:
        group = parser.add_argument_group(
            "your own data (text-classification, text-pair-classification, regression, token-classification, "
            "question-answering, multiple-choice, rerank, retrieval)")
        group.add_argument("--train", help="training file: .csv, .tsv (with a header), .jsonl or .json")
        group.add_argument("--dev", help="evaluation file, in one of the same formats")
        group.add_argument("--test", help="file to predict (labels not needed)")
        group.add_argument("--dataset", metavar="NAME[:CONFIG]",
                           help="a Hugging Face `datasets` data set instead of files (its train, validation and test "
                                "splits): a folder written by save_to_disk, a folder of data files, or a name "
                                "load_dataset knows; needs the datasets extra")
        group.add_argument("--text-column", default="text", help="column of the text")
        group.add_argument("--text-pair-column",
                           help="column of the second text of a pair (default text_pair for text-pair-classification)")
        group.add_argument("--label-column", default="label",
                           help="column of the label or score; multiple-choice: the right choice, as its text or its "
                                "index from 0")
        group.add_argument("--train-labels", metavar="FILE",
                           help="text-classification, text-pair-classification, regression, multiple-choice, rerank: "
                                "the training records' labels in a file of their own, a label a line in the records' "
                                "order (as PIQA's train-labels.lst); read as --label-column's values")
        group.add_argument("--dev-labels", metavar="FILE", help="the same for the --dev records")
        group.add_argument("--tokens-column", default="tokens",
                           help="token-classification: column of the words (a list, or a text split at spaces)")
        group.add_argument("--tags-column", default="tags",
                           help="token-classification: column of the words' tags (a list, or a text split at spaces)")
        group.add_argument("--question-column", default="question",
                           help="question-answering, multiple-choice: column of the question (or stem)")
        group.add_argument("--context-column",
                           help="question-answering: column of the passage (default context); multiple-choice: of a "
                                "first segment before the question, if any")
        group.add_argument("--answers-column", default="answers",
                           help='question-answering: column of the answers, {"text": [...], "answer_start": [...]} '
                                "(JSON in a CSV or TSV cell; empty lists: unanswerable)")
        group.add_argument("--query-column", default="query", help="rerank, retrieval: column of the query")
        group.add_argument("--passage-column", default="passage",
                           help="rerank, retrieval: column of the passage (its relevance to the query: "
                                "--label-column, 0 to 1)")
        group.add_argument("--choices-columns", nargs="+", default=["choices"], metavar="COLUMN",
                           help="multiple-choice: a column per choice, or one column holding a list of them")
