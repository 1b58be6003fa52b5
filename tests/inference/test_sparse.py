"""SPLADE: the sparse-embedding pipeline on sentence-transformers' SparseEncoder folders (model/formats/
sparse_folder.py), against `SparseEncoder.encode` on the same folder; folders bertforge writes loaded by
sentence-transformers; TEI's /embed_sparse. The folders are built here, offline, from the tiny random masked LM
transformers writes (conftest.hub_bert)."""

import json
import shutil
import time

import numpy as np
import pytest

import bertforge
from bertforge.core.errors import BertforgeError
from bertforge.model.formats.sparse_folder import read_sparse_folder, write_sparse_folder

TEXTS = ["the good film", "it was not bad at all", "a", "the the the film film of and to in is was",
         "Good, bad? It was the film of films!"]


@pytest.fixture(scope="module")
def splade_folder(hub_bert, tmp_path_factory):
    """A SparseEncoder folder written by sentence-transformers itself (its current layout), with a query prompt."""
    st = pytest.importorskip("sentence_transformers")
    if not hasattr(st, "SparseEncoder"):
        pytest.skip("needs sentence-transformers >= 5 (SparseEncoder)")
    from sentence_transformers.sparse_encoder.models import MLMTransformer, SpladePooling  # 5.0's names

    folder = tmp_path_factory.mktemp("splade")
    model = st.SparseEncoder(modules=[MLMTransformer(str(hub_bert)), SpladePooling("max")],
                             prompts={"query": "is it ", "document": ""})
    model.save(str(folder))
    return folder


def dense(results, size: int) -> np.ndarray:
    out = np.zeros((len(results), size), dtype=np.float32)
    for row, weights in zip(out, results):
        for token, weight in weights.items():
            row[token] = weight
    return out


def reference(folder, texts, **kwargs) -> np.ndarray:
    from sentence_transformers import SparseEncoder

    return SparseEncoder(str(folder), device="cpu").encode(texts, convert_to_tensor=True, **kwargs).to_dense().numpy()


def test_the_pipeline_is_sentence_transformers_sparse_encoder(splade_folder):
    embed = bertforge.pipeline(model=splade_folder)  # the folder's modules.json says sparse-embedding
    assert embed.task == "sparse-embedding"
    results = embed(TEXTS)
    expected = reference(splade_folder, TEXTS)
    ours = dense(results, expected.shape[1])
    assert np.abs(ours - expected).max() < 1e-4
    assert ((ours > 0) == (expected > 0)).all()
    for weights in results:  # largest first, all positive
        values = list(weights.values())
        assert values == sorted(values, reverse=True) and min(values) > 0
    queries = dense(embed(TEXTS, prompt_name="query"), expected.shape[1])
    assert np.abs(queries - reference(splade_folder, TEXTS, prompt_name="query")).max() < 1e-4


def test_top_k_keeps_the_largest_weights(splade_folder):
    embed = bertforge.pipeline("sparse-embedding", model=splade_folder)
    full, best = embed(TEXTS[1]), embed(TEXTS[1], top_k=3)
    assert list(best.items()) == list(full.items())[:3]
    with pytest.raises(BertforgeError, match="prompt_name 'nope'"):
        embed(TEXTS, prompt_name="nope")


def test_a_folder_bertforge_writes_is_loaded_by_sparse_encoder(hub_bert, tmp_path):
    pytest.importorskip("sentence_transformers")
    folder = shutil.copytree(hub_bert, tmp_path / "splade")
    write_sparse_folder(folder, max_seq_length=32)
    assert read_sparse_folder(folder).max_seq_length == 32
    expected = reference(folder, TEXTS)
    assert np.abs(dense(bertforge.pipeline(model=folder)(TEXTS), expected.shape[1]) - expected).max() < 1e-4


def test_a_splade_folder_is_not_read_as_a_sentence_embedding_one(splade_folder):
    with pytest.raises(BertforgeError, match="SPLADE"):
        bertforge.pipeline("sentence-embedding", model=splade_folder)


def test_tei_embed_sparse(splade_folder):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from bertforge.serving.serve import Server, create_app

    expected = reference(splade_folder, TEXTS)
    with TestClient(create_app(Server(splade_folder))) as client:
        for _ in range(300):  # the model loads in the background
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.1)
        answer = client.post("/embed_sparse", json={"inputs": TEXTS})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert len(body) == len(TEXTS)
        for row, values in zip(expected, body):
            assert [v["index"] for v in values] == np.flatnonzero(row).tolist()  # by index, TEI's order
            assert np.allclose([v["value"] for v in values], row[row > 0], atol=1e-4)
        one = client.post("/embed_sparse", json={"inputs": TEXTS[0], "prompt_name": "query"}).json()
        query = reference(splade_folder, [TEXTS[0]], prompt_name="query")[0]
        assert np.allclose([v["value"] for v in one[0]], query[query > 0], atol=1e-4)
        assert client.post("/embed", json={"inputs": TEXTS[0]}).status_code == 424  # TEI's: not this model's route
        assert client.get("/info").json()["model_type"] == {"embedding": {"pooling": "splade"}}
        mine = client.post("/v1/embed-sparse", json={"inputs": [TEXTS[0]], "top_k": 2}).json()
        assert len(mine[0]) == 2 and json.dumps(mine)


def test_embed_sparse_writes_csr_shards_and_search_ranks_by_dot_product(splade_folder, tmp_path, capsys):
    from bertforge.cli import main
    from bertforge.inference.embed import read_manifest, sparse_shard
    from bertforge.inference.search import search

    corpus = tmp_path / "passages.txt"
    corpus.write_text("\n".join(TEXTS) + "\n")
    out = tmp_path / "vectors"
    assert main(["embed", str(corpus), "--model", str(splade_folder), "--out", str(out), "--sparse",
                 "--shard-rows", "2", "--no-progress"]) == 0
    manifest = read_manifest(out)
    assert manifest["sparse"] and manifest["layout"] == "csr" and manifest["complete"]
    assert [s["rows"] for s in manifest["shards"]] == [2, 2, 1]
    expected = reference(splade_folder, TEXTS, prompt_name="document")
    rows = []
    for entry in manifest["shards"]:
        indptr, indices, values = sparse_shard(out, entry, manifest)
        for i in range(entry["rows"]):
            row = np.zeros(manifest["dims"], dtype=np.float32)
            row[indices[indptr[i]:indptr[i + 1]]] = values[indptr[i]:indptr[i + 1]]
            rows.append(row)
    assert np.abs(np.stack(rows) - expected).max() < 1e-4
    # a finished folder is left as it is; another setting is refused by name
    assert main(["embed", str(corpus), "--model", str(splade_folder), "--out", str(out), "--sparse",
                 "--shard-rows", "2", "--no-progress"]) == 0
    assert main(["embed", str(corpus), "--model", str(splade_folder), "--out", str(out), "--shard-rows", "2"]) == 2
    assert "written with --sparse True" in capsys.readouterr().err
    # search: the query's SPLADE vector (its "query" prompt) dotted with each passage's
    query = "was the film good"
    hits = search(out, [query], top_k=3)[0]
    scores = expected @ reference(splade_folder, [query], prompt_name="query")[0]
    best = np.argsort(-scores, kind="stable")[:3]
    assert [h.row for h in hits] == best.tolist()
    assert np.allclose([h.score for h in hits], scores[best], atol=1e-4)


def test_info_describes_a_splade_folder(splade_folder, capsys):
    from bertforge.cli import main

    assert main(["info", str(splade_folder)]) == 0
    assert "SPLADE (sentence-transformers SparseEncoder folder): max pooling of log(1 + relu)" in capsys.readouterr().out


def test_a_batch_runs_in_parts_of_the_logits_budget(splade_folder, monkeypatch):
    from bertforge.inference.pipelines import SparseEmbedding

    embed = bertforge.pipeline(model=splade_folder)
    whole = embed(TEXTS)
    calls = []
    token_logits = embed.runtime.token_logits
    monkeypatch.setattr(embed.runtime, "token_logits", lambda batch: calls.append(len(batch["input_ids"])) or
                        token_logits(batch))
    monkeypatch.setattr(SparseEmbedding, "LOGITS_BUDGET", 12 * embed.config.vocab_size)  # 12 tokens at a time
    parts = embed(TEXTS)
    assert len(calls) > 1 and sum(calls) == len(TEXTS)
    for a, b in zip(whole, parts):
        assert a.keys() == b.keys() and np.allclose(list(a.values()), [b[k] for k in a], atol=1e-5)
