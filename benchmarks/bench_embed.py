"""`bertforge embed` against sentence-transformers' `encode` on a corpus of wikitext passages: passages/s, the vectors
compared (cosine), peak RSS; one process, and two under torchrun (2 x 1 thread) against sentence-transformers with
the same 2 threads; with --ray, the same corpus as a Parquet folder through Ray Data's map_batches (RayEmbedder, one
actor of one thread per --threads); and embed's peak RSS at two corpus sizes (memory flat in the corpus's size).

    python benchmarks/bench_embed.py --passages 5000 --large 20000
    python benchmarks/bench_embed.py --passages 2000 --large 0 --ray --no-st   # one process, torchrun and Ray
    python benchmarks/bench_embed.py --memory 100000 1000000 --words 12     # the memory check alone, short passages

The passages: wikitext-2's validation paragraphs (BERTFORGE_SHARED/data/corpus/wikitext-2-raw) cut into sentences,
taken in runs of 1 to 8 sentences (mixed lengths, a few words to past the model's 256 tokens), cycling through the
text with new run lengths until there are enough. Each run is a child process of its own (peak RSS is its own; a
torchrun run's is its largest rank's); sentence-transformers encodes at --batch-size rows, embed at a token budget
of --batch-size x 256 (the model's length limit) padded tokens, so at least as many rows. Runs are interleaved
(ST, embed, torchrun, ...) --reps times, since the machine is shared; figures are medians, load included (model
load, process start).
"""

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, SHARED, median  # noqa: E402

MODEL = SHARED / "models" / "all-MiniLM-L6-v2"
WIKI = SHARED / "data" / "corpus" / "wikitext-2-raw" / "wiki.valid.raw"
MAX_TOKENS = 256

ST_CHILD = """
import json, resource, sys, time
t0 = time.time()
import numpy as np, torch
torch.set_num_threads(int(sys.argv[3]))
from sentence_transformers import SentenceTransformer
texts = open(sys.argv[1], encoding="utf-8").read().splitlines()
model = SentenceTransformer(sys.argv[2], device="cpu")
vectors = model.encode(texts, batch_size=int(sys.argv[4]), convert_to_numpy=True)
np.save(sys.argv[5], vectors)
print(json.dumps({"seconds": time.time() - t0, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

EMBED_CHILD = """
import json, resource, sys, time
t0 = time.time()
import torch
torch.set_num_threads(int(sys.argv[1]))
from bertforge.cli import main
code = main(["embed", *sys.argv[2:]])
print("RESULT", json.dumps({"seconds": time.time() - t0,
                            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
sys.exit(code)
"""

RAY_CHILD = """
import json, resource, sys, time
t0 = time.time()
import numpy as np, ray
from bertforge.inference.ray_embed import RayEmbedder
folder, model, actors, batch_tokens, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
ray.init(num_cpus=actors, include_dashboard=False, log_to_driver=False)
ds = ray.data.read_parquet(folder).map_batches(
    RayEmbedder, fn_constructor_kwargs={"model": model, "threads": 1, "batch_tokens": batch_tokens},
    batch_size=1024, batch_format="numpy", concurrency=actors, num_cpus=0.5)  # half a CPU each: room to read
rows = sorted(ds.take_all(), key=lambda r: r["pid"])
np.save(out, np.stack([r["embedding"] for r in rows]))
assert [r["pid"] for r in rows] == list(range(len(rows)))
print("RESULT", json.dumps({"seconds": time.time() - t0,
                            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}), flush=True)
"""


def passages(n: int, seed: int = 0) -> list[str]:
    paragraphs = [line.strip() for line in WIKI.read_text(encoding="utf-8").splitlines()
                  if line.strip() and not line.strip().startswith("=")]
    sentences = [s for p in paragraphs for s in re.split(r"(?<=[.!?]) (?=[A-Z])", p) if len(s.split()) > 2]
    rng, out, i = np.random.default_rng(seed), [], 0
    while len(out) < n:
        size = int(rng.integers(1, 9))
        out.append(" ".join(sentences[i % len(sentences):i % len(sentences) + size]))
        i += size
    return out


def run(cmd: list[str], env: dict) -> tuple[float, str]:
    t0 = time.time()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd[:6])}...: exit {done.returncode}\n{done.stderr[-3000:]}")
    return time.time() - t0, done.stdout


def st_run(corpus: Path, threads: int, batch: int, vectors: Path, env: dict) -> dict:
    wall, out = run([sys.executable, "-c", ST_CHILD, str(corpus), str(MODEL), str(threads), str(batch), str(vectors)],
                    env)
    inside = json.loads(out.strip().splitlines()[-1])
    return {"seconds": wall, "rss_mb": inside["rss_mb"], "encode_process_s": inside["seconds"]}


def embed_run(corpus: Path, out: Path, threads: int, batch: int, env: dict, processes: int = 1) -> dict:
    args = [str(corpus), "--model", str(MODEL), "--out", str(out), "--batch-tokens", str(batch * MAX_TOKENS),
            "--shard-rows", "1000", "--no-progress"]
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes)] \
        if processes > 1 else []
    if processes > 1:  # torchrun runs a script: the child's code through a file
        script = out.parent / "embed_child.py"
        script.write_text(EMBED_CHILD)
        cmd = [sys.executable, *launcher, str(script), str(threads), *args]
    else:
        cmd = [sys.executable, "-c", EMBED_CHILD, str(threads), *args]
    wall, stdout = run(cmd, env)
    results = [json.loads(line.split("RESULT", 1)[1]) for line in stdout.splitlines() if line.startswith("RESULT")]
    return {"seconds": wall, "rss_mb": max(r["rss_mb"] for r in results), "ranks": len(results)}


def ray_run(texts: list[str], tmp: Path, actors: int, batch: int, env: dict) -> dict:
    """The corpus as a Parquet folder of 8 parts (pid, text), embedded by Ray Data on a local Ray of `actors` CPUs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp / "parquet"
    folder.mkdir(exist_ok=True)
    step = -(-len(texts) // 8)
    for part, first in enumerate(range(0, len(texts), step)):
        pq.write_table(pa.table({"pid": list(range(first, min(first + step, len(texts)))),
                                 "text": texts[first:first + step]}), folder / f"part-{part}.parquet")
    wall, stdout = run([sys.executable, "-c", RAY_CHILD, str(folder), str(MODEL), str(actors), str(batch * MAX_TOKENS),
                        str(tmp / "ray.npy")], {**env, "OMP_NUM_THREADS": "1"})
    inside = json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT")).split("RESULT", 1)[1])
    return {"seconds": wall, "rss_mb": inside["rss_mb"]}


def stored(folder: Path) -> tuple[np.ndarray, list[str]]:
    manifest = json.loads((folder / "manifest.json").read_text())
    return (np.concatenate([np.load(folder / s["vectors"]) for s in manifest["shards"]]),
            [i for s in manifest["shards"] for i in json.loads((folder / s["ids"]).read_text())])


def max_cosine_gap(a: np.ndarray, b: np.ndarray) -> float:
    return float((1 - (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).max())


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=5000)
    p.add_argument("--large", type=int, default=20000, help="the second corpus size of the memory check (0: none)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--ray", action="store_true", help="also Ray Data's map_batches over the corpus as Parquet")
    p.add_argument("--no-st", action="store_true", help="without sentence-transformers' run (the vectors are then "
                                                        "compared with embed's, one process)")
    p.add_argument("--memory", type=int, nargs="+", metavar="N",
                   help="only embed's peak RSS and passages/s at these corpus sizes (no comparison)")
    p.add_argument("--words", type=int, default=0, help="--memory: passages cut to this many words (0: whole)")
    args = p.parse_args()
    if not MODEL.is_dir() or not WIKI.is_file():
        raise SystemExit(f"needs {MODEL} and {WIKI} (BERTFORGE_SHARED)")
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE", "PYTHONUNBUFFERED": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    print(f"load average at start {os.getloadavg()}", flush=True)
    if args.memory:
        return memory_check(args.memory, args.words, args.threads, args.batch_size, env)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        texts = passages(args.passages)
        corpus = tmp / "corpus.txt"
        corpus.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
        words = [len(t.split()) for t in texts]
        print(f"{len(texts)} passages, words per passage: median {median(words)}, mean {np.mean(words):.0f}, "
              f"max {max(words)}", flush=True)
        runs = {"st": [], "embed": [], "torchrun": [], "ray": []}
        for rep in range(args.reps):
            if not args.no_st:
                runs["st"].append(st_run(corpus, args.threads, args.batch_size, tmp / "st.npy", env))
            runs["embed"].append(embed_run(corpus, tmp / f"one{rep}", args.threads, args.batch_size, env))
            runs["torchrun"].append(embed_run(corpus, tmp / f"two{rep}", 1, args.batch_size,
                                              {**env, "OMP_NUM_THREADS": "1"}, processes=args.threads))
            if args.ray:
                runs["ray"].append(ray_run(texts, tmp, args.threads, args.batch_size, env))
            print({k: v[-1] for k, v in runs.items() if v}, flush=True)
        one, _ = stored(tmp / "one0")
        reference, against = (one, "embed (one process)") if args.no_st else (np.load(tmp / "st.npy"),
                                                                            "sentence-transformers")
        for name, folder in (("embed", "one0"), ("torchrun", "two0"), ("ray", None)):
            if runs[name]:
                vectors, ids = (np.load(tmp / "ray.npy"), None) if name == "ray" else stored(tmp / folder)
                assert ids in (None, [str(i) for i in range(len(texts))]), name
                print(f"{name}: max cosine gap to {against} {max_cosine_gap(vectors, reference):.2e}, max |difference| "
                      f"to embed (one process) {np.abs(vectors - one).max():.2e}")
        for name, results in runs.items():
            if not results:
                continue
            seconds = median([r["seconds"] for r in results])
            print(f"{name:9s} {len(texts) / seconds:7.1f} passages/s  ({seconds:.1f} s, peak RSS "
                  f"{max(r['rss_mb'] for r in results):.0f} MB{' per rank' if name == 'torchrun' else ''}"
                  f"{' (the driver; the actors not counted)' if name == 'ray' else ''})")
        if args.large:
            big = tmp / "big.txt"
            big.write_text("".join(t + "\n" for t in passages(args.large, seed=1)), encoding="utf-8")
            large = embed_run(big, tmp / "big", args.threads, args.batch_size, env)
            small = runs["embed"][0]
            print(f"memory: embed's peak RSS {small['rss_mb']:.0f} MB at {len(texts)} passages, "
                  f"{large['rss_mb']:.0f} MB at {args.large} ({args.large / large['seconds']:.1f} passages/s)")
    print(f"load average at end {os.getloadavg()}; {resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime:.0f} s "
          f"CPU in children")


def memory_check(sizes: list[int], words: int, threads: int, batch: int, env: dict) -> None:
    """embed's peak RSS over corpora of `sizes` passages (cut to `words` words): flat if it streams."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for n in sizes:
            corpus = tmp / f"corpus-{n}.txt"
            texts = passages(n, seed=1)
            corpus.write_text("".join(" ".join(t.split()[:words] if words else t.split()) + "\n" for t in texts),
                              encoding="utf-8")
            del texts
            result = embed_run(corpus, tmp / f"out-{n}", threads, batch, env)
            print(f"{n:,} passages: peak RSS {result['rss_mb']:.0f} MB, {n / result['seconds']:.0f} passages/s "
                  f"({result['seconds']:.0f} s), load average {os.getloadavg()[0]:.1f}", flush=True)
            for path in (tmp / f"out-{n}").iterdir():  # the vectors of the next size need the room
                path.unlink()
    print(f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
