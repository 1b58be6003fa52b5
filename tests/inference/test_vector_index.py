"""inference/vector_index.py: an approximate index (faiss IVF-Flat, usearch HNSW) over shards written as `embed`
writes them finds the exact search's top 10 (recall >= 0.95 at the defaults, the same ids on an easy case), and an
index whose folder changed since it was built, or an impossible option, is refused in one line."""

import importlib

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.inference import vector_index
from bertforge.inference.embed import KIND, VERSION, write_manifest, write_shard
from bertforge.inference.search import Index
from bertforge.inference.vector_index import build_index, check_options, open_index

DIMS = 64


def installed(kind: str):
    module = vector_index.LIBRARIES[kind][0]
    return pytest.param(kind, marks=pytest.mark.skipif(importlib.util.find_spec(module.split(".")[0]) is None,
                                                       reason=f"{kind} is not installed (pip install "
                                                              "'bertforge[index]')"))


KINDS = [installed(kind) for kind in vector_index.KINDS]


def clustered(rows: int, clusters: int = 30, noise: float = 0.8, seed: int = 0) -> np.ndarray:
    """Unit vectors around random centres: what a corpus's embeddings look like, roughly."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, DIMS)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, rows)] + noise * rng.standard_normal((rows, DIMS)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def write_folder(out, vectors: np.ndarray, shard_rows: int = 1000, model: str = "/a/model",
                 precision: str = "float32") -> dict:
    """An embeddings folder as `embed` writes it (its own shard and manifest writers), without a model run."""
    manifest = {"kind": KIND, "version": VERSION, "model": {"folder": model}, "dims": DIMS, "model_dims": DIMS,
                "precision": precision, "ranges": None, "formats": ["npy"], "sparse": False, "shards": [],
                "rows": 0, "complete": False}
    for start in range(0, len(vectors), shard_rows):
        write_shard(out, manifest, [f"doc{i}" for i in range(start, start + shard_rows)][:len(vectors) - start],
                    vectors[start:start + shard_rows])
    manifest["complete"] = True
    write_manifest(out, manifest)
    return manifest


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """3,000 vectors in 3 shards, and 100 queries near the same centres."""
    folder = tmp_path_factory.mktemp("vectors")
    vectors = clustered(3100)
    write_folder(folder, vectors[:3000])
    return folder, vectors[:3000], vectors[3000:]


def approximate(folder, kind: str, **options) -> Index:
    index = Index(folder)
    index.approximate = open_index(folder, index.manifest, kind, options)
    return index


@pytest.mark.parametrize("kind", KINDS)
def test_recall_at_the_defaults(corpus, kind):
    folder, _, queries = corpus
    build_index(folder, kind, progress=False)
    exact = Index(folder).search(queries, top_k=10)
    for rescore in (100, 0):
        found = approximate(folder, kind).search(queries, top_k=10, rescore=rescore)
        recall = np.mean([len({h.row for h in a} & {h.row for h in b}) / 10 for a, b in zip(found, exact)])
        assert recall >= 0.95, (kind, rescore, recall)


@pytest.mark.parametrize("kind", KINDS)
def test_an_easy_case_finds_the_exact_search_s_hits(corpus, kind):
    """Built by one thread: several threads' usearch graphs differ from build to build, and one in thirty missed
    the query's own vector here."""
    folder, vectors, _ = corpus
    build_index(folder, kind, progress=False, threads=1)
    queries = vectors[[5, 1500, 2999]] + 0.01 * np.random.default_rng(2).standard_normal((3, DIMS))
    exact = Index(folder).search(queries, top_k=5)
    found = approximate(folder, kind).search(queries, top_k=5)
    assert [[h.id for h in hits] for hits in found] == [[h.id for h in hits] for hits in exact]
    assert [h.row for h in found[1]] == [h.row for h in exact[1]] and found[1][0].row == 1500
    assert np.allclose([h.score for h in found[2]], [h.score for h in exact[2]], atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_every_vector_of_a_small_folder_is_reachable(tmp_path, kind):
    """A walk of the index reaches all of a few dozen vectors, every build (usearch's threads, inserting into a graph
    this small at once, left one unreachable in about one build of eight)."""
    for seed in range(24):
        folder = tmp_path / str(seed)
        write_folder(folder, clustered(40, seed=seed), shard_rows=13)
        build_index(folder, kind, progress=False)
        _, rows = approximate(folder, kind).approximate.search(clustered(3, seed=100 + seed), 40)
        assert (np.sort(rows, axis=1) == np.arange(40)).all(), seed


@pytest.mark.parametrize("kind", KINDS)
def test_one_thread_builds_the_same_index_every_time_each_vector_its_own_nearest(corpus, tmp_path, kind):
    folder, vectors, _ = corpus
    blobs = [tmp_path / build_index(folder, kind, out=tmp_path / f"{n}.json", progress=False, threads=1)["file"]
             for n in range(2)]
    assert blobs[0].read_bytes() == blobs[1].read_bytes()
    _, rows = approximate(folder, str(tmp_path / "0.json")).approximate.search(vectors, 1)
    assert (rows[:, 0] == np.arange(len(vectors))).all()


@pytest.mark.parametrize("kind", KINDS)
def test_an_int8_folder_is_indexed_dequantized(tmp_path, kind):
    vectors = clustered(1000, seed=5)
    write_folder(tmp_path, vectors, shard_rows=500, precision="int8")
    build_index(tmp_path, kind, progress=False)
    queries = vectors[[3, 700]] + 0.01 * np.random.default_rng(6).standard_normal((2, DIMS))
    exact = Index(tmp_path).search(queries, top_k=5)
    found = approximate(tmp_path, kind).search(queries, top_k=5)
    assert [[h.row for h in hits] for hits in found] == [[h.row for h in hits] for hits in exact]
    assert [h.score for h in found[1]] == pytest.approx([h.score for h in exact[1]], abs=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_a_stale_index_is_refused(tmp_path, kind):
    vectors = clustered(1200, seed=4)
    write_folder(tmp_path, vectors[:800], shard_rows=400)
    record = build_index(tmp_path, kind, progress=False)
    assert record["rows"] == 800 and [s["vectors"] for s in record["shards"]] == ["shard-00000.npy",
                                                                                   "shard-00001.npy"]
    write_folder(tmp_path, vectors, shard_rows=400)  # embedding went on: a third shard
    with pytest.raises(BertforgeError, match=r"stale: built over 2 shard\(s\), 800 vectors; DIR .* now holds 3, 1200 "
                                             rf"vectors; rebuild it: bertforge index .* --kind {kind}$"):
        open_index(tmp_path, Index(tmp_path).manifest, kind)
    build_index(tmp_path, kind, progress=False)
    write_folder(tmp_path, vectors[::-1].copy(), shard_rows=400)  # the same files and rows, other vectors
    with pytest.raises(BertforgeError, match="stale: .*shard-00000.npy changed since the index was built"):
        open_index(tmp_path, Index(tmp_path).manifest, kind)
    write_folder(tmp_path, vectors[::-1].copy(), shard_rows=400, model="/another/model")
    with pytest.raises(BertforgeError, match=r"built over another model's vectors \(/a/model\)"):
        open_index(tmp_path, Index(tmp_path).manifest, kind)
    assert len(list(tmp_path.glob(f"index-{kind}.*.{kind}"))) == 1  # the rebuilt index's file replaced the first's


@pytest.mark.parametrize("kind", KINDS)
def test_a_rebuilt_index_under_another_name(corpus, tmp_path, kind):
    folder, vectors, _ = corpus
    record = build_index(folder, kind, out=tmp_path / "mine.json", progress=False, threads=1,
                         options={"nprobe": 60} if kind == "faiss" else {"ef": 200})
    index = approximate(folder, str(tmp_path / "mine.json"))
    assert index.search(vectors[7], top_k=1)[0][0].row == 7
    assert index.approximate.options == ({"nlist": 75, "nprobe": 60} if kind == "faiss" else
                                         {"m": 16, "ef_construction": 128, "ef": 200})
    (tmp_path / record["file"]).write_bytes(b"\0" * record["bytes"])
    with pytest.raises(BertforgeError, match=rf"its {kind} file mine\.[0-9a-f]+\.{kind} cannot be read \(.+\)$"):
        approximate(folder, str(tmp_path / "mine.json"))
    (tmp_path / record["file"]).unlink()
    with pytest.raises(BertforgeError, match=rf"file mine\.[0-9a-f]+\.{kind} is missing .* --out .*mine\.json\)$"):
        approximate(folder, str(tmp_path / "mine.json"))


@pytest.mark.parametrize("kind, options, rows, built, message", [
    ("usearch", {"nlist": 10}, 100, None, "--nlist: not an option of a usearch index"),
    ("faiss", {"ef": 10}, 100, None, "--ef: not an option of a faiss index"),
    ("faiss", {"nlist": 101}, 100, None, "--nlist 101: more lists than the folder's 100 vectors"),
    ("faiss", {"nlist": 4, "nprobe": 5}, 100, None, "--nprobe 5: more lists than the index's 4"),
    ("faiss", {"nprobe": 9}, None, {"nlist": 8, "nprobe": 2}, "--nprobe 9: more lists than the index's 8"),
    ("usearch", {"m": 8}, None, {"m": 16, "ef_construction": 128, "ef": 64}, "--m: set when the index is built"),
    ("usearch", {"nprobe": 8}, None, {"m": 16, "ef_construction": 128, "ef": 64},
     r"--nprobe: not an option of a usearch index \(its options: --ef\)"),
])
def test_bad_options_are_refused(kind, options, rows, built, message):
    with pytest.raises(BertforgeError, match=message):
        check_options(kind, {"nlist": None, **options}, rows=rows, built=built)


def test_defaults_and_refused_folders(tmp_path, monkeypatch):
    assert check_options("faiss", {}, rows=1_000_000) == {"nlist": 4000, "nprobe": 126}
    assert check_options("faiss", {}, rows=6) == {"nlist": 1, "nprobe": 1}
    assert check_options("faiss", {"nprobe": 3}, built={"nlist": 8, "nprobe": 2}) == {"nlist": 8, "nprobe": 3}
    manifest = write_folder(tmp_path, clustered(50))
    manifest["precision"] = "ubinary"
    write_manifest(tmp_path, manifest)
    with pytest.raises(BertforgeError, match="holds ubinary vectors; an index is built over float32 or int8"):
        build_index(tmp_path, "faiss")
    with pytest.raises(BertforgeError, match="--index usearch: no index file .*index-usearch.json .*--kind usearch"):
        open_index(tmp_path, manifest, "usearch")

    def missing(name, *args):
        raise ImportError(name)

    monkeypatch.setattr(importlib, "import_module", missing)
    with pytest.raises(BertforgeError, match=r"--kind usearch: needs usearch, which is not installed: pip install "
                                             r"'bertforge\[index\]'"):
        vector_index.library("usearch")
