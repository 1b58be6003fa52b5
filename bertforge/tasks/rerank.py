"""Rerankers (cross-encoders): a query and a passage read together, one relevance logit out.

Task name `rerank`. The splits are your own data's (own_data.py: files, a --data folder or a `datasets` data set),
one (query, passage, label) record a row, the columns named by --query-column, --passage-column and --label-column;
the label is the passage's relevance to the query, a number from 0 to 1 (1 and 0: relevant and irrelevant). The
head is a sequence classifier with one output, as sentence-transformers' CrossEncoder with num_labels=1; its
config.json says so (num_labels 1, problem_type multi_label_classification), so that transformers,
sentence-transformers and a reranking server read the score as sigmoid(logit). Training ranks each query's
passages against each other (a query's rows whole in a batch, listwise softmax cross-entropy:
model.architectures.task_heads.ranking_loss); a query with a single passage is trained with binary cross-entropy on
its logit. The scores order a query's passages; they are not calibrated probabilities. The model is evaluated as a
ranker: MRR@10 and nDCG@10 over the dev queries (grouped by their text) that have several passages, one relevant
(metrics.ranking_metrics).
"""

import math
import numbers
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import rounded, write_text_atomic
from .base import HeadClass, Split, TaskFamily
from .glue import GlueExample, encode_glue
from .metrics import ranking_groups, ranking_metrics
from .own_data import LABEL_FILES, SOURCES, OwnData

LABEL = "relevant"  # the one output's name: its score orders a query's passages by relevance


def relevance(value, location: str) -> float:
    """A relevance label: a number (or its text, or a JSON boolean) from 0 to 1."""
    number = math.nan
    if isinstance(value, numbers.Real):  # JSON's true and false too
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if not 0 <= number <= 1:
        raise BertforgeError(f"{location}: relevance {value!r} is not a number from 0 to 1 (see --label-column; "
                             f"1 and 0 for relevant and irrelevant)")
    return number


def sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-logits.astype(np.float64)))


class RerankFamily(OwnData, TaskFamily):
    names = ("rerank",)
    model_class = HeadClass("BertForSequenceClassification")
    option_defaults = {**SOURCES, **LABEL_FILES, "query_column": "query", "passage_column": "passage",
                       "label_column": "label"}
    default_max_length = 256  # a query and a paragraph
    best_metric = "mrr@10"
    targets = {"labels": None, "groups": None}
    text_fields = {"query": str, "passage": str}

    def __init__(self, task: str, data: Path | None, max_length: int, query_column="query", passage_column="passage",
                 label_column="label", **sources):
        super().__init__(task, data, max_length)
        self.use_sources(**sources)
        self.columns = (query_column, passage_column, label_column)
        self.labels = [LABEL]

    def head_config(self) -> dict:
        return {"id2label": {0: LABEL}, "problem_type": "multi_label_classification"}

    def pairs(self, split: str, limit=None) -> list[GlueExample]:
        """The split's (query, passage, relevance) records; the test split's relevance is None."""
        query, passage, label = self.columns
        labelled = split != "test"
        records = self.records(split, {"--query-column": query, "--passage-column": passage,
                                       "--label-column": label if labelled else None})[:limit]
        for location, record in records:
            for column in (query, passage):
                if not isinstance(record[column], str) or not record[column].strip():
                    raise BertforgeError(f"{location}: {column!r} must be a non-empty text")
        return [GlueExample(f"{split}-{i}", r[query], r[passage], relevance(r[label], location) if labelled
                            else None) for i, (location, r) in enumerate(records)]

    def read(self, split: str, tokenizer, limit=None) -> Split:
        examples = self.pairs(split, limit)
        if split in self.eval_splits:  # that it has queries to rank, checked before any training
            ranking_groups([e.text_a for e in examples], [e.label for e in examples], self.source(split))
        return self.encode(split, examples, tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        """The pairs' rows; labelled, with each row's query id ("groups"), by which training ranks a query's
        passages against each other (model.architectures.task_heads.ranking_loss)."""
        encoded = encode_glue(examples, tokenizer, self.max_length)
        if "labels" in encoded:
            ids: dict[str, int] = {}
            encoded["groups"] = [ids.setdefault(e.text_a, len(ids)) for e in examples]
        return Split(name, examples, encoded)

    def example(self, record: dict, guid: str) -> GlueExample:
        return GlueExample(guid, record["query"], record["passage"], None)

    def scores(self, outputs) -> np.ndarray:
        """Each pair's relevance score, sigmoid(logit)."""
        return sigmoid(np.stack(outputs["logits"])[:, 0])

    def score(self, split: Split, outputs) -> dict:
        queries, labels = [e.text_a for e in split.examples], [e.label for e in split.examples]
        return ranking_metrics(ranking_groups(queries, labels, split.name), labels, self.scores(outputs))

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{split.name}_scores.tsv"
        rows = (f"{i}\t{s:.6g}\n" for i, s in enumerate(self.scores(outputs)))
        write_text_atomic(path, "index\tscore\n" + "".join(rows))
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        return [{"score": rounded(float(s))} for s in self.scores(outputs)]
