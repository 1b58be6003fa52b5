"""Embedding servers under load on 127.0.0.1: `bertforge serve` (/embed, text-embeddings-inference's route)
against Infinity (`infinity_emb v2`, torch engine, CPU) and sentence-transformers' `encode` behind a plain FastAPI
server (written here), all serving the same all-MiniLM-L6-v2 folder with the same thread count; and `bertforge
serve --int8` (int8 linear layers: other numbers, its cosine to fp32 reported), `bertforge serve --workers 2` (two
batches at once, each on one of the threads) and `bertforge serve --bf16`
(bf16 matrix products where the CPU has them) beside them; in fp32 on ONNX Runtime, `bertforge serve --backend onnx`
(over --onnx-model, the export of the same weights; `bertforge-onnx-w2`: two workers of one thread) and Infinity's `--engine optimum` (its own export; `pip install
'infinity-emb[server,torch,optimum]'`).

The three servers are started together (idle ones cost no CPU), warmed up, then given 1, 8, 32 and 64
concurrent clients in turn, the servers interleaved at each client count (A B C at 1, A B C at 8, ...), each
for --seconds; every client sends SST-2 dev sentences, in file order, --per-request of them a request (1, then
8: each value a round of its own), until the time is up. Reported per server and client count: inputs/s,
requests/s, p50/p99 latency, non-200 answers, the server's CPU time per input (user and system, all its
threads: a figure the other loads of a shared machine disturb less than wall time); and once, how far each
server's vectors are from
`bertforge.pipeline("sentence-embedding")`'s (the smallest cosine over 32 sentences). The last line is
`ratio=<bertforge/Infinity inputs/s at 32 clients>` for the last --per-request value.

    python3 -m benchmarks.bench_embed_servers --infinity /path/to/venv/bin/infinity_emb
    python3 -m benchmarks.bench_embed_servers --servers bertforge sentence-transformers --seconds 5   # a smoke run

Infinity (`pip install 'infinity-emb[server,torch]'`) pins versions of numpy, uvicorn and others that bertforge's
environment may not want: install it in a virtual environment of its own and name its `infinity_emb` here.
"""

import argparse
import asyncio
import base64
import json
import os
import subprocess
import sys
import time

import numpy as np

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_inference import sst2_sentences
from benchmarks.bench_serve import Connection, free_port, percentile, wait_up

CLIENTS = (1, 8, 32, 64)
SERVERS = ("bertforge", "infinity", "sentence-transformers", "bertforge-int8", "bertforge-bf16",
           "infinity-bf16", "bertforge-onnx", "infinity-onnx", "bertforge-w2", "bertforge-onnx-w2")


def st_server(model: str, port: int, threads: int):
    """sentence-transformers' encode behind FastAPI (run in a child process): a plain `def` route, which FastAPI
    runs in its thread pool, one encode call per request, as a quick embedding server is written."""
    import torch
    import uvicorn
    from fastapi import FastAPI
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(threads)
    encoder = SentenceTransformer(model, device="cpu")
    app = FastAPI()

    @app.get("/health")
    def health():
        return {"status": "ok"}

    @app.post("/embed")
    def embed(body: dict):
        return encoder.encode(body["inputs"], normalize_embeddings=True).tolist()

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def start(name: str, args, port: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(common.REPO),
           "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
    command = {
        "bertforge": [sys.executable, "-m", "bertforge", "serve", args.model, "--port", str(port),
                      "--max-input-tokens", "128", "--max-concurrent", "4096"],
        "bertforge-int8": [sys.executable, "-m", "bertforge", "serve", args.model, "--port", str(port),
                           "--max-input-tokens", "128", "--max-concurrent", "4096", "--int8"],
        "bertforge-bf16": [sys.executable, "-m", "bertforge", "serve", args.model, "--port", str(port),
                           "--max-input-tokens", "128", "--max-concurrent", "4096", "--bf16"],
        "bertforge-w2": [sys.executable, "-m", "bertforge", "serve", args.model, "--port", str(port),
                         "--max-input-tokens", "128", "--max-concurrent", "4096", "--workers", "2"],
        "bertforge-onnx": [sys.executable, "-m", "bertforge", "serve", args.onnx_model or args.model, "--port",
                           str(port), "--max-input-tokens", "128", "--max-concurrent", "4096", "--backend", "onnx",
                           "--threads", str(args.threads)],
        "bertforge-onnx-w2": [sys.executable, "-m", "bertforge", "serve", args.onnx_model or args.model, "--port",
                              str(port), "--max-input-tokens", "128", "--max-concurrent", "4096", "--backend", "onnx",
                              "--threads", "1", "--workers", "2"],
        "infinity-onnx": [args.infinity, "v2", "--model-id", args.model, "--served-model-name", "minilm", "--engine",
                          "optimum", "--device", "cpu", "--port", str(port), "--log-level", "warning",
                          "--no-model-warmup"],
        "infinity": [args.infinity, "v2", "--model-id", args.model, "--served-model-name", "minilm", "--engine",
                     "torch", "--device", "cpu", "--port", str(port), "--log-level", "warning",
                     "--no-model-warmup"],
        "infinity-bf16": [args.infinity, "v2", "--model-id", args.model, "--served-model-name", "minilm", "--engine",
                          "torch", "--device", "cpu", "--port", str(port), "--log-level", "warning",
                          "--no-model-warmup", "--dtype", "bfloat16"],
        "sentence-transformers": [sys.executable, "-m", "benchmarks.bench_embed_servers", "--st-server", args.model,
                                  "--port", str(port), "--threads", str(args.threads)]}[name]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system, all threads) a process has used so far (Linux's /proc)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request(name: str, texts: list[str]) -> tuple[str, dict]:
    """The path and body of an embedding request to server `name`."""
    if name.startswith("infinity"):  # OpenAI's shape, under /embeddings
        return "/embeddings", {"model": "minilm", "input": texts, "encoding_format": "float"}
    return "/embed", {"inputs": texts}


def vectors(name: str, answer: bytes) -> np.ndarray:
    data = json.loads(answer)
    if name.startswith("infinity"):
        data = [d["embedding"] for d in data["data"]]
        if data and isinstance(data[0], str):
            data = [np.frombuffer(base64.b64decode(d), dtype="<f4") for d in data]
    return np.array(data, dtype=np.float64)


async def load(name: str, port: int, sentences: list[str], clients: int, per_request: int, seconds: float):
    """(inputs/s, requests/s, sorted latencies, non-200 count) of one run."""
    latencies, failed, sent = [], 0, 0
    deadline = time.perf_counter() + seconds

    async def one_client():
        nonlocal sent, failed
        connection = Connection(port)
        while time.perf_counter() < deadline:
            first = (sent * per_request) % len(sentences)
            sent += 1
            path, body = request(name, sentences[first:first + per_request] or sentences[:per_request])
            start = time.perf_counter()
            try:
                status, _ = await connection.request("POST", path, body)
            except (OSError, ValueError, asyncio.IncompleteReadError):
                failed += 1
                continue
            latencies.append(time.perf_counter() - start)
            failed += status != 200
        connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    elapsed = time.perf_counter() - started
    answered = len(latencies) - failed
    return answered * per_request / elapsed, answered / elapsed, sorted(latencies), failed


async def agreement(name: str, port: int, sentences: list[str], expected: np.ndarray) -> float:
    """The smallest cosine between the server's vectors and the offline pipeline's."""
    path, body = request(name, sentences)
    connection = Connection(port)
    status, answer = await connection.request("POST", path, body)
    connection.close()
    if status != 200:
        raise RuntimeError(f"{name}: {status} {answer[:200]!r}")
    got = vectors(name, answer)
    return float((np.sum(got * expected, 1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)).min())


async def bench(args, sentences):
    import bertforge

    expected = np.array(bertforge.pipeline("sentence-embedding", model=args.model)(sentences[:32]))
    ports = {name: free_port() for name in args.servers}
    processes = {name: start(name, args, ports[name]) for name in args.servers}
    try:
        for name in args.servers:
            await wait_up(ports[name], processes[name], timeout=300)
            print(f"{name}: cosine to the pipeline's vectors >= "
                  f"{await agreement(name, ports[name], sentences[:32], expected):.6f}", flush=True)
            await load(name, ports[name], sentences, 8, max(args.per_request), args.warmup)
        results = {}
        for per_request in args.per_request:
            for clients in args.clients:
                for name in args.servers:
                    cpu = cpu_seconds(processes[name].pid)
                    rate, requests, latencies, failed = await load(name, ports[name], sentences, clients,
                                                                   per_request, args.seconds)
                    cpu = (cpu_seconds(processes[name].pid) - cpu) / max(1.0, rate * args.seconds)
                    results[name, per_request, clients] = rate, latencies
                    print(f"{name:22s} inputs/request={per_request} clients={clients:3d} inputs/s={rate:7.1f} "
                          f"requests/s={requests:7.1f} p50={percentile(latencies, 50) * 1e3:7.1f}ms "
                          f"p99={percentile(latencies, 99) * 1e3:7.1f}ms non-200={failed} "
                          f"server_cpu_ms/input={cpu * 1e3:5.2f}", flush=True)
    finally:
        for process in processes.values():
            process.terminate()
            process.wait(timeout=60)
    return results


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(common.SHARED / "models" / "all-MiniLM-L6-v2"))
    p.add_argument("--infinity", default="infinity_emb", help="Infinity's command (in its own environment)")
    p.add_argument("--onnx-model", help="bertforge-onnx: the model's folder with its export (`bertforge export onnx "
                                        "MODEL OUT`; default: --model)")
    p.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    p.add_argument("--clients", nargs="+", type=int, default=list(CLIENTS))
    p.add_argument("--per-request", nargs="+", type=int, default=[1, 8], help="sentences a request, a round each")
    p.add_argument("--seconds", type=float, default=20.0, help="per server and client count")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of 8 clients per server before timing")
    p.add_argument("--threads", type=int, default=common.THREADS)
    p.add_argument("--st-server", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.st_server:
        return st_server(args.st_server, args.port, args.threads)
    common.setup(args.threads)
    print(common.machine(), flush=True)
    sentences = sst2_sentences(872)
    print(f"{len(sentences)} SST-2 dev sentences, {args.per_request} a request, {args.seconds:g} s per run, "
          f"servers {', '.join(args.servers)}", flush=True)
    results = asyncio.run(bench(args, sentences))
    pairs = [(ours, theirs) for ours, theirs in (("bertforge-bf16", "infinity"), ("bertforge-bf16", "infinity-bf16"),
                                                 ("bertforge-w2", "infinity"), ("bertforge-onnx-w2", "infinity"),
                                                 ("bertforge-onnx", "infinity"), ("bertforge-onnx", "infinity-onnx"),
                                                 ("bertforge", "infinity")) if {ours, theirs} <= set(args.servers)]
    for per_request in args.per_request:
        for ours, theirs in pairs:  # bertforge's fp32 against Infinity's last: the `ratio=` line
            (rate, latencies), (their_rate, their_latencies) = results[ours, per_request, 32], \
                results[theirs, per_request, 32]
            print(f"{per_request} a request, 32 clients: {ours} / {theirs} = {rate / their_rate:.2f}x, p99 "
                  f"{percentile(latencies, 99) * 1e3:.1f} ms against {percentile(their_latencies, 99) * 1e3:.1f} ms")
        if ("bertforge", "infinity") in pairs:
            print(f"ratio={results['bertforge', per_request, 32][0] / results['infinity', per_request, 32][0]:.2f}")

if __name__ == "__main__":
    main()
