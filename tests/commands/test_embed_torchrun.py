"""`bertforge embed` under torchrun: two gloo processes over loopback write the vectors and ids of one process, each
rank its own shards (round-robin), rank 0 the one manifest; two machines (two torchrun agents meeting at a c10d
rendezvous over loopback) do the same; a stopped run resumes shard by shard."""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from bertforge.cli import main
from tests.conftest import REPO
from tests.inference.test_embed import corpus_file, sentences, st_folder, stored  # noqa: F401 (a fixture)

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def torchrun(*args, processes: int = 2):
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(processes), "-m", "bertforge", "embed", *map(str, args)],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return corpus_file(tmp_path_factory.mktemp("corpus"), sentences(73, seed=3))


def test_two_processes_write_the_vectors_of_one(st_folder, corpus, tmp_path):  # noqa: F811
    flags = ["--model", st_folder, "--shard-rows", 10, "--batch-tokens", 256, "--dimensions", 24, "--no-progress"]
    assert main(["embed", str(corpus), "--out", str(tmp_path / "one"), *map(str, flags)]) == 0
    done = torchrun(corpus, "--out", tmp_path / "two", *flags)
    assert done.stdout.count("73 passages ->") == 1  # rank 0 reports
    one, two = (json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("one", "two"))
    assert two["complete"] and two["rows"] == 73 and two["shards"] == one["shards"]  # corpus order, same entries
    (a, ids_a), (b, ids_b) = stored(tmp_path / "one"), stored(tmp_path / "two")
    assert ids_a == ids_b == [str(i) for i in range(73)]
    assert np.allclose(a, b, atol=1e-6)
    assert sorted(p.name for p in (tmp_path / "two").iterdir()) == sorted(p.name for p in (tmp_path / "one").iterdir())
    again = torchrun(corpus, "--out", tmp_path / "two", *flags)  # complete: nothing redone
    assert "73 passages ->" in again.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_machines_write_the_vectors_of_one(st_folder, corpus, tmp_path):  # noqa: F811
    """`torchrun --nnodes 2` as docs/distributed.md runs it on two machines, here two agents (node ranks 0 and 1, one
    process each) meeting at a c10d rendezvous on 127.0.0.1, writing into one folder (a shared file system)."""
    flags = ["--model", st_folder, "--shard-rows", 10, "--batch-tokens", 256, "--no-progress"]
    assert main(["embed", str(corpus), "--out", str(tmp_path / "one"), *map(str, flags)]) == 0
    endpoint = f"127.0.0.1:{free_port()}"
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank",
                                str(rank), "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-id", "embed",
                                "--rdzv-endpoint", endpoint, "-m", "bertforge", "embed", str(corpus), "--out",
                                str(tmp_path / "two"), *map(str, flags)],
                               cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for rank in (0, 1)]
    outputs = [agent.communicate(timeout=300) for agent in agents]
    assert [agent.returncode for agent in agents] == [0, 0], [err[-2000:] for _, err in outputs]
    assert sum(out.count("73 passages ->") for out, _ in outputs) == 1  # the global rank 0 reports
    (a, ids_a), (b, ids_b) = stored(tmp_path / "one"), stored(tmp_path / "two")
    assert ids_a == ids_b == [str(i) for i in range(73)]
    assert np.allclose(a, b, atol=1e-6)
    assert json.loads((tmp_path / "two" / "manifest.json").read_text())["complete"]


def test_a_stopped_run_resumes_under_torchrun(st_folder, corpus, tmp_path):  # noqa: F811
    """A folder as a stopped run leaves it: two shards listed by one process's manifest, one more written by a rank
    (its entry file), the rest missing; two processes finish it without rewriting those three."""
    flags = ["--model", st_folder, "--shard-rows", 10, "--no-progress"]
    assert main(["embed", str(corpus), "--out", str(tmp_path / "one"), *map(str, flags)]) == 0
    out = tmp_path / "out"
    assert main(["embed", str(corpus), "--out", str(out), *map(str, flags)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    entry3 = manifest["shards"][3]
    (out / "shard-00003.entry.json").write_text(json.dumps(entry3))
    for entry in manifest["shards"][2:3] + manifest["shards"][4:]:
        for name in (entry["vectors"], entry["ids"]):
            (out / name).unlink()
    manifest.update(shards=manifest["shards"][:2], rows=20, complete=False)
    (out / "manifest.json").write_text(json.dumps(manifest))
    kept = {name: (out / name).stat().st_mtime_ns for name in ("shard-00000.npy", "shard-00001.npy",
                                                                "shard-00003.npy")}
    torchrun(corpus, "--out", out, *flags)
    assert {name: (out / name).stat().st_mtime_ns for name in kept} == kept
    done = json.loads((out / "manifest.json").read_text())
    assert done["complete"] and [s["rows"] for s in done["shards"]] == [10] * 7 + [3]
    assert not list(out.glob("*.entry.json")) and not list(out.glob(".*.tmp"))
    (a, ids_a), (b, ids_b) = stored(tmp_path / "one"), stored(out)
    assert ids_a == ids_b and np.allclose(a, b, atol=1e-6)


def test_scalar_precisions_need_calibration_under_torchrun(st_folder, corpus, tmp_path):  # noqa: F811
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "bertforge", "embed", str(corpus), "--model", str(st_folder), "--out",
                           str(tmp_path / "q"), "--precision", "int8", "--no-progress"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "--precision int8 under torchrun: give --calibration" in done.stderr
