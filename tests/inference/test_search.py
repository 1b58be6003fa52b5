"""inference/search.py: exact inner-product search over shards, the same hits as a brute-force ranking; binary and
int8 folders rescored with the float query."""

import numpy as np
import pytest

from bertforge.inference import search as search_module
from bertforge.inference.embed import embed_corpus
from bertforge.inference.quantize import dequantize, quantize, unpack
from bertforge.inference.search import Index, search
from tests.inference.test_embed import corpus_file, sentences, st_folder, stored  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return corpus_file(tmp_path_factory.mktemp("search"), sentences(60, seed=3))


def brute_force(scores: np.ndarray, k: int) -> list[list[int]]:
    return [np.lexsort((np.arange(len(row)), -row))[:k].tolist() for row in scores]


def test_float_search_is_exact_across_shards_and_blocks(st_folder, corpus, tmp_path, monkeypatch):  # noqa: F811
    embed_corpus(corpus, tmp_path / "out", st_folder, shard_rows=13)
    vectors, ids = stored(tmp_path / "out")
    queries = vectors[[4, 40]] + np.random.default_rng(0).normal(scale=0.1, size=(2, 32)).astype(np.float32)
    monkeypatch.setattr(search_module, "BLOCK_SCORES", 2)  # blocks of 256 rows: one a shard; merged across shards
    hits = Index(tmp_path / "out").search(queries, top_k=7)
    assert [[h.row for h in found] for found in hits] == brute_force(queries @ vectors.T, 7)
    assert [h.id for h in hits[0]] == [ids[h.row] for h in hits[0]]
    assert np.allclose([h.score for h in hits[1]], np.sort(queries[1] @ vectors.T)[::-1][:7], atol=1e-6)


@pytest.mark.parametrize("precision", ["binary", "ubinary", "int8", "uint8"])
def test_quantized_search_rescores_its_candidates(st_folder, corpus, tmp_path, precision):  # noqa: F811
    embed_corpus(corpus, tmp_path / "float", st_folder, shard_rows=25)
    floats, _ = stored(tmp_path / "float")
    manifest = embed_corpus(corpus, tmp_path / "q", st_folder, shard_rows=25, precision=precision)
    values, _ = stored(tmp_path / "q")
    ranges = None if manifest["ranges"] is None else np.array(manifest["ranges"], dtype=np.float32)
    query = floats[[11]]
    index = Index(tmp_path / "q")
    if precision.endswith("binary"):
        first = -((values.view(np.uint8) ^ quantize(query, precision).view(np.uint8)[0]).astype(np.uint8)
                  [:, :, None] >> np.arange(8)[::-1] & 1).sum((1, 2))
        stored_floats = unpack(values, precision, 32)
    else:
        first = quantize(query, precision, ranges).astype(np.int64) @ values.astype(np.int64).T
        first = first[0]
        stored_floats = dequantize(values, precision, ranges)
    candidates = brute_force(first[None].astype(np.float64), 20)[0]
    hits = index.search(query, top_k=5, rescore=20)[0]
    rescored = stored_floats[candidates] @ query[0].astype(np.float64)
    expected = [candidates[i] for i in np.lexsort((candidates, -rescored))[:5]]
    assert {h.row for h in hits} <= set(np.flatnonzero(first >= np.sort(first)[-20]).tolist())  # candidates
    assert np.allclose([h.score for h in hits], np.sort(rescored)[::-1][:5])
    assert hits[0].row == expected[0]
    no_rescoring = index.search(query, top_k=3, rescore=0)[0]
    assert [h.score for h in no_rescoring] == sorted(first.astype(float), reverse=True)[:3]


def test_search_embeds_queries_with_the_query_prompt(st_folder, corpus, tmp_path):  # noqa: F811
    from bertforge.inference.embed import Embedder

    embed_corpus(corpus, tmp_path / "out", st_folder, prompt="passage")
    vectors, _ = stored(tmp_path / "out")
    query = Embedder(st_folder, prompt="query")(["a good film"])
    hits = search(tmp_path / "out", ["a good film"], top_k=3)[0]
    assert [h.row for h in hits] == brute_force(query @ vectors.T, 3)[0]
