"""Exact search over the shards `bertforge embed` writes (embed.py): queries embedded as the passages were (the
manifest's model, dims and normalisation, the folder's "query" prompt where it names one), scored by inner product
against every vector, a shard at a time, memory-mapped, a block of rows at a time, the best kept by a merge of
each block's argpartition: what is in memory is a block's scores, whatever the corpus's size.

At int8/uint8 precision the query is quantized with the manifest's ranges and scored against the integers; at
binary/ubinary, by the Hamming distance of its bits (fewer differing bits first). Then, as sentence-transformers'
quantization guide does, the best `rescore` candidates (at least top_k) are rescored with the float query: its
inner product with their unpacked bits (0/1) or their dequantized values; the scores shown are those. rescore 0
keeps the quantized scores (binary: minus the Hamming distance).

A sparse folder (`embed --sparse`: SPLADE vectors in CSR shards) is searched by the inner product of the query's
SPLADE vector (SparseEmbedder, with the folder's "query" prompt) with each passage's: the query's weights at each
stored token, summed per row.

With an approximate index (vector_index.py, `bertforge index`; `Index.approximate`), the candidates of each query
are the index's max(top_k, rescore) nearest instead of a scan of every row, rescored (rescore > 0) with the float
query against their stored vectors, so that the scores shown are those the exact search gives the same rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from .embed import Embedder, SparseEmbedder, read_manifest, shard_ids, shard_vectors, sparse_shard
from .quantize import as_floats, hamming, is_scalar, quantize

BLOCK_SCORES = 1 << 22  # scores held at a time: a block of rows x the queries
RESCORE = 100


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    row: int  # the passage's row in the corpus
    text: str | None = None  # the passage, where it was read again (a reranked hit)

    def as_dict(self) -> dict:
        return {"id": self.id, "score": self.score, "row": self.row, **({"text": self.text} if self.text else {})}


def query_embedder(manifest: dict, model=None, device: str | None = None, revision: str | None = None) -> Embedder:
    """The Embedder a folder's queries take: `model` (default: the manifest's, at its commit), with the folder's
    query prompt, the manifest's dims and bf16."""
    if model is None:
        named = manifest["model"]
        model, revision = (named["repo_id"], named["commit"]) if "repo_id" in named else (named["folder"], None)
    if manifest.get("sparse"):
        embedder = SparseEmbedder(model, revision, device, manifest["bf16"], prompt=manifest.get("query_prompt"),
                                  dense_queries=True)
        if embedder.dims != manifest["dims"]:
            raise BertforgeError(f"--model {model}: its vocabulary has {embedder.dims} tokens; the folder's "
                                 f"{manifest['dims']}")
        return embedder
    dims = manifest["dims"] if manifest["dims"] != manifest["model_dims"] else None
    embedder = Embedder(model, revision, device, manifest["bf16"], prompt=manifest.get("query_prompt"),
                        dimensions=dims)
    if embedder.dims != manifest["dims"]:
        raise BertforgeError(f"--model {model}: its vectors have {embedder.dims} dimensions; the folder's "
                             f"{manifest['dims']}")
    return embedder


class Index:
    """An embeddings folder searched by exact inner product (see the module docstring)."""

    def __init__(self, folder, flag: str = "DIR"):
        self.folder = Path(folder)
        self.approximate = None  # a vector_index.VectorIndex over this folder, where a search is to use one
        self.manifest = read_manifest(self.folder, flag)
        if not self.manifest["shards"]:
            raise BertforgeError(f"{flag} {folder}: holds no shards yet")
        if not self.manifest["complete"]:
            import logging
            logging.getLogger("bertforge").warning(
                f"{folder}: embedding did not finish; searching the {self.manifest['rows']} passages written")
        self.precision, self.dims = self.manifest["precision"], self.manifest["dims"]
        self.ranges = None if self.manifest.get("ranges") is None else np.asarray(self.manifest["ranges"],
                                                                                  dtype=np.float32)
        self.starts = np.cumsum([0] + [s["rows"] for s in self.manifest["shards"]])
        self._ids: dict[int, list[str]] = {}
        self._values: dict[int, np.ndarray] = {}  # shards memory-mapped once: rescoring reads a few rows of many

    def search(self, queries: np.ndarray, top_k: int = 10, rescore: int = RESCORE) -> list[list[Hit]]:
        """The top_k hits of each float query [q, dims] (or [dims]), best first."""
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if queries.shape[1] != self.dims:
            raise BertforgeError(f"queries of {queries.shape[1]} dimensions; the folder's vectors have {self.dims}")
        if top_k < 1 or rescore < 0:
            raise BertforgeError("--top-k must be at least 1 and --rescore at least 0")
        quantized = self.precision != "float32"
        keep = max(top_k, rescore) if quantized or self.approximate else top_k
        scores, rows = self.approximate.search(queries, keep) if self.approximate else self._scan(queries, keep)
        if (quantized or self.approximate) and rescore:
            scores = self._rescore(queries, rows)
        hits = []
        for q in range(len(queries)):
            valid = rows[q] >= 0
            order = np.lexsort((rows[q][valid], -scores[q][valid]))[:top_k]  # ties: the earlier row first
            hits.append([Hit(self.id_of(int(r)), float(s), int(r))
                         for r, s in zip(rows[q][valid][order], scores[q][valid][order])])
        return hits

    def _block_scores(self, queries: np.ndarray, block: np.ndarray) -> np.ndarray:
        """[q, rows] scores, higher better, of a block of stored vectors."""
        if self.precision == "float32":
            return queries @ np.asarray(block, dtype=np.float32).T
        if is_scalar(self.precision):
            q = quantize(queries, self.precision, self.ranges).astype(np.float64)  # integers, exact in float64
            return q @ np.asarray(block, dtype=np.float64).T
        bits = quantize(queries, self.precision)
        return -np.stack([hamming(b, block, self.precision) for b in bits]).astype(np.float64)

    def _scan(self, queries: np.ndarray, keep: int) -> tuple[np.ndarray, np.ndarray]:
        """The `keep` best (score, corpus row) of each query over every shard, unordered; rows -1 where fewer."""
        best_scores = np.full((len(queries), 0), -np.inf)
        best_rows = np.full((len(queries), 0), -1, dtype=np.int64)
        for n, entry in enumerate(self.manifest["shards"]):
            for start, scores in self._shard_scores(queries, entry):
                rows = np.broadcast_to(np.arange(scores.shape[1], dtype=np.int64) + self.starts[n] + start,
                                       scores.shape)
                best_scores = np.concatenate([best_scores, scores], 1)
                best_rows = np.concatenate([best_rows, rows], 1)
                if best_scores.shape[1] > keep:
                    top = np.argpartition(-best_scores, keep - 1, axis=1)[:, :keep]
                    best_scores = np.take_along_axis(best_scores, top, 1)
                    best_rows = np.take_along_axis(best_rows, top, 1)
        return best_scores, best_rows

    def _shard_scores(self, queries: np.ndarray, entry: dict):
        """(first row, [q, rows] scores) of a shard's blocks of rows."""
        if self.manifest.get("sparse"):
            yield from self._sparse_scores(queries, entry)
            return
        values = shard_vectors(self.folder, entry, self.manifest)
        step = max(256, BLOCK_SCORES // len(queries))
        for start in range(0, len(values), step):
            yield start, self._block_scores(queries, values[start:start + step])

    def _sparse_scores(self, queries: np.ndarray, entry: dict):
        """A CSR shard's inner products with dense queries [q, vocabulary], by blocks of rows whose weights times
        the queries hold about BLOCK_SCORES values."""
        indptr, indices, values = sparse_shard(self.folder, entry, self.manifest)
        per_row = max(1.0, entry["nnz"] / max(entry["rows"], 1))
        step = max(1, int(BLOCK_SCORES // (len(queries) * per_row)))
        for start in range(0, entry["rows"], step):
            stop = min(start + step, entry["rows"])
            lo, hi = int(indptr[start]), int(indptr[stop])
            rows = np.repeat(np.arange(stop - start), np.diff(indptr[start:stop + 1]))
            products = queries[:, indices[lo:hi]] * values[lo:hi]  # [q, nnz of the block]
            scores = np.zeros((len(queries), stop - start), dtype=np.float64)
            for q in range(len(queries)):
                scores[q] = np.bincount(rows, weights=products[q], minlength=stop - start)
            yield start, scores

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """The stored vectors of corpus rows (any order)."""
        shard = np.searchsorted(self.starts, rows, side="right") - 1
        out = None
        for n in np.unique(shard):
            if n not in self._values:
                self._values[n] = shard_vectors(self.folder, self.manifest["shards"][n], self.manifest)
            values = self._values[n]
            picked = np.asarray(values[rows[shard == n] - self.starts[n]])
            if out is None:
                out = np.empty((len(rows), values.shape[1]), dtype=values.dtype)
            out[shard == n] = picked
        return out

    def _rescore(self, queries: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The float queries' inner products with their candidates' stored vectors (unpacked or dequantized)."""
        scores = np.full(rows.shape, -np.inf)
        for q in range(len(queries)):
            valid = rows[q] >= 0
            if not valid.any():
                continue
            floats = as_floats(self.vectors(rows[q][valid]), self.precision, self.dims, self.ranges)
            scores[q][valid] = floats.astype(np.float64) @ queries[q].astype(np.float64)
        return scores

    def id_of(self, row: int) -> str:
        n = int(np.searchsorted(self.starts, row, side="right") - 1)
        if n not in self._ids:
            self._ids[n] = shard_ids(self.folder, self.manifest["shards"][n])
        return str(self._ids[n][row - self.starts[n]])


def search(folder, queries: list[str], model=None, top_k: int = 10, rescore: int = RESCORE,
           device: str | None = None, revision: str | None = None, approximate: str | None = None) -> list[list[Hit]]:
    """The top_k hits of each query text in the embeddings folder `folder` (among the candidates of its approximate
    index, where `approximate` names one: "faiss", "usearch" or an index file)."""
    index = Index(folder)
    if approximate:
        from .vector_index import open_index

        index.approximate = open_index(folder, index.manifest, approximate)
    embedder = query_embedder(index.manifest, model, device, revision)
    return index.search(embedder(list(queries)), top_k, rescore)


def passage_texts(manifest: dict, rows, encoding: str = "utf-8") -> dict[int, str]:
    """The texts of corpus rows, read again from the corpus the folder was embedded from (one pass, streamed, up
    to the last row asked for)."""
    from ..core.tables import passages

    wanted, found = set(rows), {}
    if not wanted:
        return found
    corpus = Path(manifest["corpus"])
    if not corpus.is_file():
        raise BertforgeError(f"--rerank: {corpus}, the corpus this folder was embedded from, is gone: the passages' "
                             "texts are read from it")
    last = max(wanted)
    stream = passages(corpus, manifest.get("text_column"), manifest.get("id_column"), encoding)
    for row, (_, text) in enumerate(stream):
        if row in wanted:
            found[row] = text
        if row >= last:
            break
    return found


def rerank(queries: list[str], results: list[list[Hit]], manifest: dict, model, revision: str | None = None,
           device: str | None = None, encoding: str = "utf-8") -> list[list[Hit]]:
    """Each query's hits scored again by a cross-encoder `model` (a sequence classifier of one output over the pair
    (query, passage), as text-embeddings-inference's /rerank: the sigmoid of its logit) and put in that order, each
    with its text."""
    from .pipelines import pipeline

    scorer = pipeline("text-classification", model=model, revision=revision, device=device)
    if scorer.config.num_labels != 1:
        raise BertforgeError(f"--rerank {model}: a reranker is a sequence classifier of one output (a cross-encoder), "
                             f"not one of {scorer.config.num_labels} labels")
    texts = passage_texts(manifest, [hit.row for hits in results for hit in hits], encoding)
    reranked = []
    for query, hits in zip(queries, results):
        outputs = scorer([[query, texts[hit.row]] for hit in hits], top_k=None, function_to_apply="sigmoid")
        scored = [Hit(hit.id, float(out[0]["score"]), hit.row, texts[hit.row]) for hit, out in zip(hits, outputs)]
        reranked.append(sorted(scored, key=lambda hit: -hit.score))
    return reranked
