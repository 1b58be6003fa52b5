"""Retrieval: a bi-encoder (bi_encoder.py) fine-tuned on (query, passage) pairs with in-batch negatives, evaluated
by searching: each dev query against every dev passage.

Task name `retrieval`. The data are a reranker's (rerank.py: --query-column, --passage-column, --label-column, a
relevance from 0 to 1): training takes the relevant pairs (label >= 0.5), the other passages of a batch being each
query's negatives (MultipleNegativesRankingLoss). Evaluation embeds the split's distinct queries that have a
relevant passage and all its distinct passages, and scores MRR@10, nDCG@10 and recall@10 of each query over all the
passages (metrics.retrieval_metrics). The fine-tuned model is saved as a sentence-transformers folder (mean
pooling, normalised), as all-MiniLM-L6-v2 ships.
"""

from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import rounded, write_text_atomic
from ..inference.batches import SEQUENCE_INPUTS
from .base import HeadClass, Split
from .metrics import RELEVANT, retrieval_metrics
from .rerank import RerankFamily

PASSAGE_INPUTS = {f"passage_{k}": pad for k, pad in SEQUENCE_INPUTS.items()}


def tokenized(texts: list[str], tokenizer, max_length: int, prefix: str = "") -> dict[str, list]:
    enc = tokenizer(texts, truncation=True, max_length=max_length, padding=False)
    return {prefix + k: list(enc[k]) for k in SEQUENCE_INPUTS}


class RetrievalFamily(RerankFamily):
    names = ("retrieval",)
    model_class = HeadClass("BertBiEncoder", "bertforge.model.bi_encoder")
    output_keys = ("embedding",)
    targets = PASSAGE_INPUTS  # training rows carry their passage beside the query
    text_fields = {"text": str}

    def __init__(self, task: str, data: Path | None, max_length: int, **options):
        super().__init__(task, data, max_length, **options)
        self.labels = []  # an embedder has no labels

    def head_config(self) -> dict:
        return {}

    def use_model_labels(self, config) -> None:
        pass

    def predicts_test(self) -> bool:
        return False

    def read(self, split: str, tokenizer, limit=None) -> Split:
        examples = self.pairs(split, limit)
        if split == "train":
            relevant = [e for e in examples if e.label >= RELEVANT]
            if not relevant:
                raise BertforgeError(f"{self.source(split)}: no relevant pair (label >= {RELEVANT}) to train on")
            encoded = {**tokenized([e.text_a for e in relevant], tokenizer, self.max_length),
                       **tokenized([e.text_b for e in relevant], tokenizer, self.max_length, "passage_")}
            return Split(split, relevant, encoded)
        return self.search_split(split, examples, tokenizer)

    def search_split(self, name: str, examples: list, tokenizer) -> Split:
        """Rows: the distinct queries that have a relevant passage (all, unlabelled), then the distinct passages;
        extra["relevant"]: queries x passages."""
        passages = list(dict.fromkeys(e.text_b for e in examples))
        labelled = any(e.label is not None for e in examples)
        queries = list(dict.fromkeys(e.text_a for e in examples if not labelled or e.label >= RELEVANT))
        if not queries:
            raise BertforgeError(f"{self.source(name)}: no query has a relevant passage (label >= {RELEVANT})")
        row, column = {q: i for i, q in enumerate(queries)}, {p: i for i, p in enumerate(passages)}
        relevant = np.zeros((len(queries), len(passages)), dtype=bool)
        for e in examples:
            if e.label is not None and e.label >= RELEVANT:
                relevant[row[e.text_a], column[e.text_b]] = True
        split = self.encode(name, queries + passages, tokenizer)
        split.extra.update(queries=queries, passages=passages, relevant=relevant)
        return split

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        return Split(name, examples, tokenized(examples, tokenizer, self.max_length))

    def example(self, record: dict, guid: str) -> str:
        return record["text"]

    def search(self, split: Split, outputs) -> np.ndarray:
        """Cosine similarities, queries x passages."""
        vectors, n = np.stack(outputs["embedding"]), len(split.extra["queries"])
        return vectors[:n] @ vectors[n:].T

    def score(self, split: Split, outputs) -> dict:
        return retrieval_metrics(self.search(split, outputs), split.extra["relevant"])

    def write(self, split: Split, outputs, folder: Path) -> Path:
        """Each query's ten best passages: query index, rank, passage index, cosine."""
        path = folder / f"{split.name}_retrieved.tsv"
        rows = []
        for q, scores in enumerate(self.search(split, outputs)):
            best = np.argsort(-scores, kind="stable")[:10]
            rows += [f"{q}\t{rank}\t{p}\t{scores[p]:.6g}\n" for rank, p in enumerate(best, 1)]
        write_text_atomic(path, "query\trank\tpassage\tcosine\n" + "".join(rows))
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        return [{"embedding": rounded(v.tolist())} for v in outputs["embedding"]]
