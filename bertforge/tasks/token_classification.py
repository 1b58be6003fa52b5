"""Your own tagged words: a tag per word (BIO entities, parts of speech, any tag set), on CoNLL NER's encoding and
outputs (ner.py: each word's tag on its first piece).

The splits are your own data's (own_data.py). --tokens-column holds a row's words and --tags-column their tags:
lists in JSON lines and data sets, texts split at spaces in CSV and TSV. The tag set is the training split's,
sorted, and saved as the model's id2label. Evaluation reports the accuracy over words and, when every tag is O,
B-TYPE or I-TYPE, conlleval's entity-level precision, recall and F1 (F1 then picks the best epoch).
"""

import itertools
import json
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import write_text_atomic
from .base import Split, TaskFamily
from .metrics import accuracy, ner_metrics, split_tag
from .ner import NerFamily, NerSentence
from .own_data import SOURCES, OwnData, label_index, label_order, label_text, single_class


def words_of(value, location: str, column: str) -> list[str]:
    """A row's words (or tags): a list, or a text split at spaces."""
    if isinstance(value, str):
        value = value.split()
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, (str, int)) and not isinstance(v, bool) and str(v).strip() for v in value)):
        raise BertforgeError(f"{location}: {column!r} must be a non-empty list of texts (or one text of them "
                             f"separated by spaces)")
    return [str(v) for v in value]


def is_entity_tags(labels: list[str]) -> bool:
    """Every tag is O, B-TYPE or I-TYPE."""
    try:
        for label in labels:
            split_tag(label)
    except ValueError:
        return False
    return True


class TokenClassificationFamily(OwnData, NerFamily):
    names = ("token-classification",)
    option_defaults = {**SOURCES, "tokens_column": "tokens", "tags_column": "tags"}

    def __init__(self, task: str, data: Path | None, max_length: int, tokens_column="tokens", tags_column="tags",
                 **sources):
        TaskFamily.__init__(self, task, data, max_length)  # not NerFamily's, which reads CoNLL-2003's tag set
        self.use_sources(**sources)
        self.columns = (tokens_column, tags_column)
        self.labels = None  # the training split's tags (see read), or the fine-tuned model's

    @property
    def best_metric(self) -> str:
        return "f1" if is_entity_tags(self.labels) else "accuracy"

    def read(self, split: str, tokenizer, limit=None) -> Split:
        words_column, tags_column = self.columns
        labelled = split != "test"
        rows = []
        for location, record in self.records(split, {"--tokens-column": words_column,
                                                     "--tags-column": tags_column if labelled else None}):
            words = words_of(record[words_column], location, words_column)
            tags = [label_text(tag, location, "tag") for tag in words_of(record[tags_column], location, tags_column)] \
                if labelled else None
            if tags is not None and len(tags) != len(words):
                raise BertforgeError(f"{location}: {len(tags)} tags ({tags_column!r}) for {len(words)} words "
                                     f"({words_column!r})")
            rows.append((location, words, tags))
        if self.labels is None:  # the training split's tag set, before any example is cut off by `limit`
            self.labels = label_order(tag for _, _, tags in rows for tag in tags)
            if split == "train":
                single_class(self.labels, self.source(split), "tag")
        for location, _, tags in rows[:limit] if labelled else ():
            for tag in tags:
                label_index(tag, self.labels, location, "tag")
        # unlabelled rows get placeholder tags: encode_ner wants one per word
        sentences = [NerSentence(words, tags or [self.labels[0]] * len(words)) for _, words, tags in rows[:limit]]
        return self.encode(split, sentences, tokenizer)

    def score(self, split: Split, outputs) -> dict:
        gold, predicted = [s.tags for s in split.examples], self.tags(split, outputs)
        metrics = {"accuracy": accuracy(list(itertools.chain(*predicted)), list(itertools.chain(*gold)))}
        if is_entity_tags(self.labels):
            metrics.update({k: v for k, v in ner_metrics(gold, predicted).items() if k != "per_type"})
        return metrics

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{split.name}_predictions.jsonl"
        lines = (json.dumps(p, ensure_ascii=False) + "\n" for p in self.describe(split, outputs))
        write_text_atomic(path, "".join(lines))
        return path
