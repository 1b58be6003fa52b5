"""inference/embed.py: a corpus into shards, equal to sentence-transformers' encode, resumable, its settings kept."""

import json
import shutil

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.inference import embed
from bertforge.inference.embed import Embedder, embed_corpus, read_manifest, shard_ids, shard_vectors
from bertforge.model.formats.sentence_folder import ST_CONFIG, write_sentence_folder
from tests.conftest import one_line_error, require_shared

WORDS = "the of and to in is was film good bad it not".split()


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(1, 30))) for _ in range(n)]


def corpus_file(tmp_path, texts, name="corpus.txt"):
    path = tmp_path / name
    path.write_text("".join(t + "\n" for t in texts))
    return path


def stored(folder) -> tuple[np.ndarray, list[str]]:
    manifest = read_manifest(folder)
    return (np.concatenate([shard_vectors(folder, s, manifest) for s in manifest["shards"]]),
            [i for s in manifest["shards"] for i in shard_ids(folder, s)])


@pytest.fixture(scope="module")
def st_folder(hub_bert, tmp_path_factory):
    """hub_bert as a sentence-transformers folder: mean pooling, normalised, a query and a passage prompt."""
    folder = tmp_path_factory.mktemp("st") / "model"
    shutil.copytree(hub_bert, folder)
    write_sentence_folder(folder, "mean", normalize=True, max_seq_length=64)
    (folder / ST_CONFIG).write_text(json.dumps({"prompts": {"query": "it is ", "passage": "the film "},
                                                "default_prompt_name": None}))
    return folder


def cosines(a, b):
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


@pytest.mark.slow
def test_minilm_vectors_equal_sentence_transformers(tmp_path):
    """all-MiniLM-L6-v2 (shared): every vector within 1e-5 cosine of SentenceTransformer(folder).encode."""
    st = pytest.importorskip("sentence_transformers")
    folder = require_shared("models", "all-MiniLM-L6-v2")
    lines = require_shared("data", "corpus", "wikitext-2-raw", "wiki.valid.raw").read_text().splitlines()
    texts = [line.strip() for line in lines if line.strip()][:96]
    manifest = embed_corpus(corpus_file(tmp_path, texts), tmp_path / "out", folder, shard_rows=40)
    vectors, ids = stored(tmp_path / "out")
    assert [s["rows"] for s in manifest["shards"]] == [40, 40, 16] and ids == [str(i) for i in range(96)]
    reference = st.SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    assert (1 - cosines(vectors, reference)).max() < 1e-5
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)  # a plain folder: normalised, mean
    assert manifest["model"] == {"folder": str(folder.resolve())} and manifest["dims"] == 384 and manifest["complete"]


def test_prompt_and_matryoshka_equal_sentence_transformers(st_folder, tmp_path):
    st = pytest.importorskip("sentence_transformers")
    texts = sentences(30)
    manifest = embed_corpus(corpus_file(tmp_path, texts), tmp_path / "out", st_folder, prompt="passage",
                            dimensions=20, shard_rows=16)
    vectors, _ = stored(tmp_path / "out")
    model = st.SentenceTransformer(str(st_folder), device="cpu")
    reference = model.encode(texts, prompt_name="passage", truncate_dim=20, normalize_embeddings=True)
    assert vectors.shape == (30, 20) and (1 - cosines(vectors, reference)).max() < 1e-5
    assert np.allclose(vectors, reference, atol=1e-5)
    assert manifest["prompt"] == "passage" and manifest["query_prompt"] == "query" and manifest["model_dims"] == 32


@pytest.mark.parametrize("precision", ["int8", "uint8", "binary", "ubinary"])
def test_quantized_shards_equal_quantize_embeddings(st_folder, tmp_path, precision):
    """One shard: its own ranges are the corpus's, as quantize_embeddings computes them; and with calibration."""
    quantization = pytest.importorskip("sentence_transformers.util.quantization")
    corpus = corpus_file(tmp_path, sentences(40))
    embed_corpus(corpus, tmp_path / "float", st_folder)
    floats, _ = stored(tmp_path / "float")
    manifest = embed_corpus(corpus, tmp_path / "q", st_folder, precision=precision)
    values, _ = stored(tmp_path / "q")
    assert np.array_equal(values, quantization.quantize_embeddings(floats, precision))
    if precision.endswith("int8"):
        assert np.allclose(manifest["ranges"], [floats.min(0), floats.max(0)])
        calibration = np.random.default_rng(0).normal(scale=0.3, size=(10, 32)).astype(np.float32)
        np.save(tmp_path / "cal.npy", calibration)
        embed_corpus(corpus, tmp_path / "cal", st_folder, precision=precision, calibration=tmp_path / "cal.npy",
                     shard_rows=7)
        values, _ = stored(tmp_path / "cal")
        assert np.array_equal(values, quantization.quantize_embeddings(floats, precision,
                                                                       calibration_embeddings=calibration))


def test_a_stopped_run_resumes_without_redoing_a_shard(st_folder, tmp_path, monkeypatch):
    corpus = corpus_file(tmp_path, sentences(50))
    embed_corpus(corpus, tmp_path / "whole", st_folder, shard_rows=12)
    calls, real = [], embed.write_shard

    def stopping(out, manifest, ids, floats):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(ids[0])
        real(out, manifest, ids, floats)
    monkeypatch.setattr(embed, "write_shard", stopping)
    with pytest.raises(KeyboardInterrupt):
        embed_corpus(corpus, tmp_path / "out", st_folder, shard_rows=12)
    assert not read_manifest(tmp_path / "out")["complete"]
    monkeypatch.setattr(embed, "write_shard", lambda *a: (calls.append(a[2][0]), real(*a)))
    manifest = embed_corpus(corpus, tmp_path / "out", st_folder, shard_rows=12)
    assert calls == ["0", "12", "24", "36", "48"] and manifest["complete"]
    assert [(s["first_row"], s["rows"], s["first_id"], s["last_id"]) for s in manifest["shards"]] == \
        [(0, 12, "0", "11"), (12, 12, "12", "23"), (24, 12, "24", "35"), (36, 12, "36", "47"), (48, 2, "48", "49")]
    (a, ids_a), (b, ids_b) = stored(tmp_path / "whole"), stored(tmp_path / "out")
    assert ids_a == ids_b == [str(i) for i in range(50)] and np.array_equal(a, b)
    calls.clear()
    embed_corpus(corpus, tmp_path / "out", st_folder, shard_rows=12)  # complete: nothing redone
    assert calls == []


def test_parquet_in_and_out(st_folder, tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    texts = sentences(9)
    pq.write_table(pa.table({"pid": [f"p{i}" for i in range(9)], "body": texts}), tmp_path / "c.parquet")
    manifest = embed_corpus(tmp_path / "c.parquet", tmp_path / "out", st_folder, text_column="body", id_column="pid",
                            formats=["parquet"], shard_rows=5, precision="ubinary")
    table = pq.read_table(tmp_path / "out" / manifest["shards"][1]["parquet"])
    values, ids = stored(tmp_path / "out")
    assert ids == [f"p{i}" for i in range(9)] and table.column("id").to_pylist() == ids[5:]
    assert np.array_equal(np.array(table.column("vector").to_pylist(), dtype=np.uint8), values[5:])


def test_bad_input_is_one_line(st_folder, hub_bert, tmp_path):
    corpus = corpus_file(tmp_path, sentences(5))
    embed_corpus(corpus, tmp_path / "out", st_folder)
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus, tmp_path / "out", hub_bert)
    assert "holds the embeddings of another model" in one_line_error(e, tmp_path / "out", "manifest.json")
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus, tmp_path / "out", st_folder, precision="int8")
    assert "written with --precision float32, not int8" in one_line_error(e)
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus, tmp_path / "o2", st_folder, precision="int4")
    assert "--precision 'int4': choose one of" in one_line_error(e)
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus, tmp_path / "o3", st_folder, prompt="document")
    assert "--prompt document" in one_line_error(e, "config_sentence_transformers.json")
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus, tmp_path / "o4", st_folder, dimensions=33)
    assert "--dimensions 33: the model's vectors have 32" in one_line_error(e)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(BertforgeError) as e:
        embed_corpus(tmp_path / "empty.csv", tmp_path / "o5", st_folder)
    one_line_error(e, "empty.csv")
    (tmp_path / "c.csv").write_text("id,text\n1,a film\n")
    with pytest.raises(BertforgeError) as e:
        embed_corpus(tmp_path / "c.csv", tmp_path / "o6", st_folder, text_column="body")
    assert "no column 'body'" in one_line_error(e, "c.csv")
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus_file(tmp_path, ["one"], "one.txt"), tmp_path / "o7", st_folder, precision="int8")
    assert "--calibration" in one_line_error(e)


def test_a_hub_name_is_recorded_with_its_commit_and_searched_at_it(hub, st_folder, tmp_path):  # noqa: F811
    from bertforge.inference.search import search

    commit = hub.add("org/st-tiny", st_folder)
    corpus = corpus_file(tmp_path, sentences(12))
    manifest = embed_corpus(corpus, tmp_path / "out", "org/st-tiny", prompt="passage")
    assert manifest["model"] == {"repo_id": "org/st-tiny", "commit": commit} and manifest["model_name"] == "org/st-tiny"
    hub.add("org/st-tiny", tmp_path / "out")  # main moves on; the folder's queries still use its commit
    hits = search(tmp_path / "out", ["a good film"], top_k=2)[0]
    vectors, ids = stored(tmp_path / "out")
    query = Embedder(st_folder, prompt="query")(["a good film"])[0]
    assert [h.id for h in hits] == [ids[i] for i in np.argsort(-(vectors @ query))[:2]]
    with pytest.raises(BertforgeError) as e:
        embed_corpus(corpus, tmp_path / "out", "org/st-tiny", revision="main", prompt="passage")
    assert "another model" in one_line_error(e)
