"""Exact search against an approximate index (`bertforge index`: faiss IVF-Flat, usearch HNSW) on random clustered
vectors: each index's build time and size, and per query (one query at a time, as `search` runs an interactive
query, through `Index.search` with its rescoring of the candidates) the median and 95th-percentile latency and the
recall@10 against the exact search's top 10.

    nice -n 10 python -m benchmarks.bench_index [--rows 200000] [--dims 384] [--noise 1.5] [--queries 200]
        [--threads 0 1]

The vectors: unit vectors `--noise` away from one of `--clusters` random centres, written in shards of 100,000 rows
by `embed`'s own shard writer; the queries are more of them, near the same centres. A markdown row per method and
setting; then, for each `--threads` count, the usearch build's time and the vectors whose own search (top 1) does
not find them, which no query can reach; then the machine.
"""

import argparse
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from bertforge.inference.embed import KIND, VERSION, write_manifest, write_shard
from bertforge.inference.search import Index
from bertforge.inference.vector_index import build_index, float_blocks, open_index


def clustered(rows: int, dims: int, clusters: int, noise: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dims)).astype(np.float32)
    vectors = np.empty((rows, dims), dtype=np.float32)
    for start in range(0, rows, 50_000):  # in blocks: the noise of all rows at once would be twice the vectors
        n = min(50_000, rows - start)
        block = centres[rng.integers(0, clusters, n)] + noise * rng.standard_normal((n, dims), dtype=np.float32)
        vectors[start:start + n] = block / np.linalg.norm(block, axis=1, keepdims=True)
    return vectors


def write_folder(out: Path, vectors: np.ndarray, shard_rows: int = 100_000) -> None:
    manifest = {"kind": KIND, "version": VERSION, "model": {"folder": "synthetic"}, "dims": vectors.shape[1],
                "model_dims": vectors.shape[1], "precision": "float32", "ranges": None, "formats": ["npy"],
                "sparse": False, "shards": [], "rows": 0, "complete": False}
    for start in range(0, len(vectors), shard_rows):
        chunk = vectors[start:start + shard_rows]
        write_shard(out, manifest, [str(i) for i in range(start, start + len(chunk))], chunk)
    manifest["complete"] = True
    write_manifest(out, manifest)


def timed_search(index: Index, queries: np.ndarray, rescore: int) -> tuple[list[list[int]], np.ndarray]:
    """Each query's top 10 rows, searched one at a time, and the latencies in ms."""
    found, latencies = [], []
    for query in queries:
        t0 = time.perf_counter()
        hits = index.search(query[None], top_k=10, rescore=rescore)[0]
        latencies.append((time.perf_counter() - t0) * 1e3)
        found.append([h.row for h in hits])
    return found, np.array(latencies)


def row(name: str, setting: str, found, exact, latencies, build: str = "", size: str = "") -> str:
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact)])
    return (f"| {name} | {setting} | {build} | {size} | {np.median(latencies):.2f} | "
            f"{np.percentile(latencies, 95):.2f} | {recall:.4f} |")


def run_kind(folder: Path, kind: str, settings: list[dict], queries, exact, rescore: int) -> list[str]:
    t0 = time.perf_counter()
    record = build_index(folder, kind, progress=False)
    build, size = f"{time.perf_counter() - t0:.1f}", f"{record['bytes'] / 2 ** 20:.0f}"
    shown = ", ".join(f"{k} {v}" for k, v in record["options"].items())
    rows = []
    for options in [{}] + settings:
        index = Index(folder)
        index.approximate = open_index(folder, index.manifest, kind, options)
        for rescoring in ([rescore, 0] if not options else [rescore]):
            found, latencies = timed_search(index, queries, rescoring)
            setting = (f"defaults ({shown})" if not options else ", ".join(f"{k} {v}" for k, v in options.items()))
            rows.append(row(f"{kind} {record['structure']}", f"{setting}, rescore {rescoring}", found, exact,
                            latencies, build if not rows else "", size if not rows else ""))
    return rows


def reachability(folder: Path, threads: int) -> str:
    """A usearch build by `threads` threads (0: every core): its time, and the vectors that are not their own nearest."""
    t0 = time.perf_counter()
    record = build_index(folder, "usearch", out=folder / f"threads-{threads}.json", progress=False, threads=threads)
    build = time.perf_counter() - t0
    index = Index(folder)
    index.approximate = open_index(folder, index.manifest, str(folder / f"threads-{threads}.json"))
    missed = sum(int((index.approximate.search(vectors, 1)[1][:, 0] != first + np.arange(len(vectors))).sum())
                 for first, vectors in float_blocks(folder, index.manifest))
    return f"| usearch HNSW | {threads or 'every core'} | {build:.1f} | {missed} of {record['rows']} |"


def machine() -> str:
    info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    flags = fields.get("Flags", "")
    avx512 = sorted(f for f in flags.split() if f.startswith("avx512"))
    return (f"{fields.get('Model name', '?').strip()} (family {fields.get('CPU family', '?').strip()}, model "
            f"{fields.get('Model', '?').strip()}), {fields.get('CPU(s)', '?').strip()} CPUs, "
            f"AVX-512: {'yes (' + ', '.join(avx512) + ')' if avx512 else 'no'}; python {platform.python_version()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=1.5, help="the noise's scale per value, the centres' is 1")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rescore", type=int, default=100)
    parser.add_argument("--threads", type=int, nargs="*", default=[], help="usearch builds by this many threads "
                        "(0: every core), each timed and checked for vectors no search reaches")
    args = parser.parse_args()
    import faiss
    import usearch

    vectors = clustered(args.rows + args.queries, args.dims, args.clusters, args.noise)
    queries, vectors = vectors[args.rows:], vectors[:args.rows]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_folder(folder, vectors)
        del vectors
        exact, latencies = timed_search(Index(folder), queries, args.rescore)
        print("| method | setting | build s | index MiB | median ms | p95 ms | recall@10 |")
        print("|---|---|---|---|---|---|---|")
        print(row("exact", "inner product over every vector", exact, exact, latencies))
        for line in (run_kind(folder, "faiss", [{"nprobe": 16}, {"nprobe": 128}], queries, exact, args.rescore)
                     + run_kind(folder, "usearch", [{"ef": 32}, {"ef": 128}], queries, exact, args.rescore)):
            print(line, flush=True)
        if args.threads:
            print("\n| index | build threads | build s | vectors not their own nearest |\n|---|---|---|---|")
        for threads in args.threads:
            print(reachability(folder, threads), flush=True)
    print(f"\n{args.rows} x {args.dims} float32, {args.clusters} clusters, noise {args.noise}, {args.queries} queries "
          f"one at a time; faiss {faiss.__version__}, usearch {usearch.__version__}; {machine()}")


if __name__ == "__main__":
    main()
