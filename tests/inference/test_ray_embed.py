"""inference/ray_embed.py: RayEmbedder in Ray Data's map_batches, on a local Ray over a Parquet folder, gives the
vectors of `bertforge embed` (one process); and called directly, its options."""

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.inference.embed import embed_corpus
from bertforge.inference.ray_embed import RayEmbedder
from tests.inference.test_embed import corpus_file, sentences, st_folder, stored  # noqa: F401 (a fixture)


def test_a_batch_gets_an_embedding_column_as_embed_makes_it(st_folder, tmp_path):  # noqa: F811
    pd = pytest.importorskip("pandas")
    quantization = pytest.importorskip("sentence_transformers.util.quantization")
    texts = sentences(20, seed=4)
    embed_corpus(corpus_file(tmp_path, texts), tmp_path / "one", st_folder, dimensions=24)
    expected, _ = stored(tmp_path / "one")
    frame = pd.DataFrame({"pid": range(20), "body": texts})
    got = RayEmbedder(st_folder, column="body", dimensions=24)(frame)
    assert list(got.columns) == ["pid", "body", "embedding"] and "embedding" not in frame
    assert np.allclose(np.stack(got["embedding"]), expected, atol=1e-6)
    packed = RayEmbedder(st_folder, dimensions=24, precision="ubinary")({"text": np.array(texts)})
    assert np.array_equal(packed["embedding"], quantization.quantize_embeddings(expected, "ubinary"))
    ranges = np.stack([expected.min(0), expected.max(0)])
    scalar = RayEmbedder(st_folder, dimensions=24, precision="int8", ranges=ranges)({"text": np.array(texts[:3])})
    assert np.array_equal(scalar["embedding"], quantization.quantize_embeddings(expected, "int8")[:3])
    with pytest.raises(BertforgeError, match="precision int8: give calibration"):
        RayEmbedder(st_folder, precision="int8")
    with pytest.raises(BertforgeError, match="no column 'text'"):
        RayEmbedder(st_folder)(frame)


def test_map_batches_on_a_local_ray_equals_embed(st_folder, tmp_path):  # noqa: F811
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'bertforge[ray]')")
    pytest.importorskip("ray.data", reason="ray's data library is not installed (pip install 'bertforge[ray]')")
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    texts = sentences(60, seed=6)
    embed_corpus(corpus_file(tmp_path, texts), tmp_path / "one", st_folder)
    expected, _ = stored(tmp_path / "one")
    (tmp_path / "pq").mkdir()
    for part in range(3):
        rows = range(part * 20, part * 20 + 20)
        pq.write_table(pa.table({"pid": list(rows), "text": [texts[i] for i in rows]}),
                       tmp_path / "pq" / f"part-{part}.parquet")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        for batch_format in ("pandas", "numpy"):
            ds = ray.data.read_parquet(str(tmp_path / "pq"), override_num_blocks=3).map_batches(
                RayEmbedder, fn_constructor_kwargs={"model": str(st_folder), "threads": 1}, batch_size=16,
                batch_format=batch_format, concurrency=2, num_cpus=0.5)  # two actors, a CPU left to read
            rows = ds.take_all()
            assert sorted(r["pid"] for r in rows) == list(range(60))
            got = np.stack([r["embedding"] for r in sorted(rows, key=lambda r: r["pid"])])
            assert got.shape == (60, 32) and np.allclose(got, expected, atol=1e-5)
    finally:
        ray.shutdown()
