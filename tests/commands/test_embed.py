"""`bertforge embed`: the command; a run killed with SIGKILL resumes to the vectors of an uninterrupted run; memory
flat in the corpus's size."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

from bertforge.cli import main
from tests.conftest import REPO
from tests.inference.test_embed import corpus_file, sentences, st_folder, stored  # noqa: F401 (a fixture)

# the command in a child process; after each shard it waits a little, so that a kill lands mid-run
SLOWED = ("import sys, time; from bertforge.inference import embed; real = embed.write_shard; "
          "embed.write_shard = lambda *a: (real(*a), time.sleep(0.15)); from bertforge.cli import main; "
          "code = main(sys.argv[1:]); import resource; "
          "print('maxrss', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss); sys.exit(code)")


def child(*args, slow: float = 0.15):
    return subprocess.Popen([sys.executable, "-c", SLOWED.replace("0.15", str(slow)), "embed", *map(str, args)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})


def test_embed_command_writes_shards_and_names_bad_input(st_folder, tmp_path, capsys):  # noqa: F811
    corpus = corpus_file(tmp_path, sentences(25))
    assert main(["embed", str(corpus), "--model", str(st_folder), "--out", str(tmp_path / "out"), "--shard-rows",
                 "10", "--precision", "ubinary", "--dimensions", "16", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "25 passages ->" in captured.out and "passage/s" not in captured.err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [s["rows"] for s in manifest["shards"]] == [10, 10, 5] and manifest["complete"]
    assert (manifest["dims"], manifest["precision"], manifest["model_dims"]) == (16, "ubinary", 32)
    assert stored(tmp_path / "out")[0].shape == (25, 2)
    assert main(["embed", str(corpus), "--model", str(st_folder), "--out", str(tmp_path / "out"), "--no-progress"]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "written with --dimensions 16, not (none)" in error and "manifest.json" in error
    assert main(["embed", str(corpus), "--model", str(st_folder), "--out", str(tmp_path / "o"), "--precision",
                 "int4"]) == 2
    assert "--precision: invalid choice: 'int4'" in capsys.readouterr().err
    assert main(["embed", str(corpus), "--model", str(st_folder), "--out", str(tmp_path / "bar"), "--bf16"]) == 0
    assert "passage/s" in capsys.readouterr().err  # the progress bar, which --no-progress hides
    assert stored(tmp_path / "bar")[0].shape == (25, 32)


def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_vectors(st_folder, tmp_path):  # noqa: F811
    corpus = corpus_file(tmp_path, sentences(600, seed=5))
    flags = ["--model", st_folder, "--shard-rows", 40, "--batch-tokens", 512, "--no-progress"]
    assert main(["embed", str(corpus), "--out", str(tmp_path / "whole"), *map(str, flags)]) == 0
    run = child(corpus, "--out", tmp_path / "out", *flags)
    manifest, deadline = tmp_path / "out" / "manifest.json", time.time() + 120
    while time.time() < deadline and run.poll() is None:
        if manifest.exists() and len(json.loads(manifest.read_text())["shards"]) >= 3:
            time.sleep(0.2)  # into the next shard's chunk
            break
        time.sleep(0.01)
    assert run.poll() is None, run.communicate()
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    cut = json.loads(manifest.read_text())
    assert not cut["complete"] and 3 <= len(cut["shards"]) < 15
    first = {s["vectors"]: (tmp_path / "out" / s["vectors"]).stat().st_mtime_ns for s in cut["shards"]}
    resumed = child(corpus, "--out", tmp_path / "out", *flags, slow=0)
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    done = json.loads(manifest.read_text())
    assert done["complete"] and [s["rows"] for s in done["shards"]] == [40] * 15
    assert {v: (tmp_path / "out" / v).stat().st_mtime_ns for v in first} == first  # finished shards never redone
    (whole, whole_ids), (vectors, ids) = stored(tmp_path / "whole"), stored(tmp_path / "out")
    assert ids == whole_ids == [str(i) for i in range(600)]
    assert np.allclose(vectors, whole, atol=1e-6)
    assert not list((tmp_path / "out").glob(".*.tmp"))


def peak_rss_kb(st_folder, tmp_path, rows: int) -> int:  # noqa: F811
    corpus = corpus_file(tmp_path, sentences(rows, seed=rows), f"c{rows}.txt")
    run = child(corpus, "--out", tmp_path / f"out{rows}", "--model", st_folder, "--shard-rows", 100, "--no-progress",
                slow=0)
    out, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    return int(out.split("maxrss")[1].split()[0])


def test_memory_is_flat_in_the_corpus_size(st_folder, tmp_path):  # noqa: F811
    small, large = peak_rss_kb(st_folder, tmp_path, 300), peak_rss_kb(st_folder, tmp_path, 3000)
    assert large - small < 24 * 1024, (small, large)  # kB: ten times the rows, a few MB more at most
