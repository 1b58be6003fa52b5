"""`bertforge index` and `bertforge search --index`: an index built over a folder that `embed` wrote answers a query
with the exact search's hits in its format; a stale index, or a flag of the wrong kind, is a one-line error."""

import importlib.util
import json

import pytest

from bertforge.cli import main
from tests.commands.test_search import folder  # noqa: F401 (a fixture)
from tests.inference.test_embed import st_folder  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(name) is None for name in ("faiss", "usearch")),
                                reason="faiss-cpu or usearch is not installed (pip install 'bertforge[index]')")


def hits(capsys, *words) -> list:
    capsys.readouterr()
    assert main(["search", *map(str, words), "--json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", ["faiss", "usearch"])
def test_search_with_an_index_gives_the_exact_search_s_hits(folder, kind, capsys):  # noqa: F811
    assert main(["index", str(folder), "--kind", kind, "--no-progress", "--threads", "1"]) == 0
    assert json.loads((folder / f"index-{kind}.json").read_text())["threads"] == 1
    line = capsys.readouterr().out
    assert line.startswith(f"40 vectors of {folder} -> {folder / f'index-{kind}.json'}: {kind} ")
    exact = hits(capsys, folder, "a good film", "the bad", "--top-k", "5")
    found = hits(capsys, folder, "a good film", "the bad", "--top-k", "5", "--index", kind)
    assert [[h["id"] for h in r["hits"]] for r in found] == [[h["id"] for h in r["hits"]] for r in exact]
    assert [[h["row"] for h in r["hits"]] for r in found] == [[h["row"] for h in r["hits"]] for r in exact]
    for a, b in zip(found, exact):
        assert [h["score"] for h in a["hits"]] == pytest.approx([h["score"] for h in b["hits"]], abs=1e-6)


def test_index_flags_and_a_stale_index(folder, tmp_path, capsys):  # noqa: F811
    assert main(["index", str(folder), "--kind", "usearch", "--nlist", "4"]) == 2
    assert "--nlist: not an option of a usearch index (its options: --m, --ef-construction, --ef)" in \
        capsys.readouterr().err
    assert main(["index", str(folder), "--kind", "faiss", "--nlist", "41"]) == 2
    assert "--nlist 41: more lists than the folder's 40 vectors" in capsys.readouterr().err
    assert main(["index", str(folder), "--kind", "faiss", "--out", str(folder / "manifest.json")]) == 2
    assert "is also the input" in capsys.readouterr().err
    assert main(["search", str(folder), "a query", "--index", "faiss"]) == 2
    assert f"--index faiss: no index file {folder / 'index-faiss.json'}" in capsys.readouterr().err
    assert main(["search", str(folder), "a query", "--nprobe", "3"]) == 2
    assert "--nprobe: an option of --index, which is not given" in capsys.readouterr().err
    assert main(["index", str(folder), "--kind", "faiss", "--nlist", "2", "--no-progress", "--out",
                 str(tmp_path / "ivf.json")]) == 0
    assert main(["search", str(folder), "a query", "--index", str(tmp_path / "ivf.json"), "--ef", "8"]) == 2
    assert "--ef: not an option of a faiss index (its options: --nprobe)" in capsys.readouterr().err
    assert main(["search", str(folder), "a query", "--index", str(tmp_path / "ivf.json"), "--nprobe", "3"]) == 2
    assert "--nprobe 3: more lists than the index's 2" in capsys.readouterr().err
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["shards"].pop()
    manifest["rows"] = sum(s["rows"] for s in manifest["shards"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    capsys.readouterr()
    assert main(["search", str(folder), "a query", "--index", str(tmp_path / "ivf.json")]) == 2
    err = capsys.readouterr().err
    assert "stale: built over 3 shard(s), 40 vectors" in err and "now holds 2, 30 vectors" in err
    assert f"rebuild it: bertforge index {folder} --kind faiss --out {tmp_path / 'ivf.json'}" in err
    assert len(err.strip().splitlines()) == 1
