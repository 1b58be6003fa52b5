"""Load test on 127.0.0.1: `bertforge serve` against a plain one-request-at-a-time server around transformers'
`pipeline("text-classification")`, measured in the same run.

Each server runs alone (one after the other, same thread count, in --reps interleaved rounds: figures are
medians), is warmed up, then gets 1, 8 and 32 concurrent clients, each sending one SST-2 dev sentence per
request ({"inputs": text}) until the run has sent --requests requests or --seconds have passed. Reported:
requests/s and p50/p95/p99 latency per server and client count; every answer is checked against the offline
`bertforge.pipeline` prediction of that sentence (labels agreeing, for fp32). The plain server is Python's
single-threaded HTTPServer: what a quick `pipeline()` wrapper does. The clients are a minimal HTTP/1.1 client
on asyncio streams (`Connection`): the load generator shares the host's cores with the servers, and httpx
spends ~2.6 ms of CPU per request against this client's ~0.07 ms (measured against an empty FastAPI app).

    python3 -m benchmarks.bench_serve --model RUN/best --quick              # a smoke run: 100 requests
    python3 -m benchmarks.bench_serve --model RUN/best --onnx RUN/onnx      # fp32, int8, ONNX, ONNX int8
    python3 -m benchmarks.bench_serve --model RUN/best --soak 10000         # reliability: bad requests mixed in

--model is a text-classification checkpoint (a MiniLM fine-tuned on SST-2 for the figures in BENCHMARKS.md);
--onnx the folder `bertforge export onnx --int8` wrote from it.
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_inference import sst2_sentences

CLIENTS = (1, 8, 32)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def plain_server(model: str, port: int, threads: int):
    """transformers' pipeline behind HTTPServer: one request at a time (run in a child process)."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    classify = transformers.pipeline("text-classification", model=model, device="cpu")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.reply(200, {"status": "ok"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            self.reply(200, [classify(body["inputs"])[0]])

        def reply(self, status, payload):
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    class Server(HTTPServer):
        request_queue_size = 256  # connections waiting their turn (HTTP/1.0: one request each)

    Server(("127.0.0.1", port), Handler).serve_forever()


def start(name: str, args, port: int) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(common.REPO)}
    if name == "transformers":
        command = [sys.executable, "-m", "benchmarks.bench_serve", "--plain-server", args.model, "--port", str(port),
                   "--threads", str(args.threads)]
    else:
        folder = args.onnx if name.startswith("onnx") else args.model
        command = [sys.executable, "-m", "bertforge", "serve", folder, "--port", str(port), "--max-length", "128",
                   "--max-concurrent", "4096", "--threads", str(args.threads),
                   *(["--backend", "onnx"] if name.startswith("onnx") else []), *(["--int8"] if "int8" in name else []),
                   *(["--workers", "2"] if name.endswith("-w2") else [])]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def http_request(method: str, path: str, payload=None, headers: dict | None = None) -> bytes:
    """The bytes of an HTTP/1.1 request with a JSON body (`payload` as is when it is bytes already); `headers`
    added to or replacing the usual ones (lower-case names; a value None drops that header)."""
    body = payload if isinstance(payload, bytes) else b"" if payload is None else json.dumps(payload).encode()
    fields = {"host": "127.0.0.1", "content-type": "application/json", "content-length": str(len(body)),
              **(headers or {})}
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items() if value is not None)
    return f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode() + body


class Connection:
    """One client's HTTP/1.1 connection, kept alive between requests (reopened when the server closes it, as
    the HTTP/1.0 plain server does after each answer): JSON POSTs and GETs, nothing else; `headers` are sent with
    each request (see http_request)."""

    def __init__(self, port: int, headers: dict | None = None):
        self.port, self.headers, self.reader, self.writer = port, headers, None, None

    async def request(self, method: str, path: str, payload=None) -> tuple[int, bytes]:
        reused = self.writer is not None
        if not reused:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(http_request(method, path, payload, self.headers))
        try:
            status_line = await self.reader.readline()
            if not status_line and reused:  # the server closed the idle connection: once more on a new one
                self.close()
                return await self.request(method, path, payload)
            version, status = status_line.split(b" ", 2)[:2]
            headers = {}
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            answer = await self.reader.readexactly(int(headers.get("content-length", 0)))
        except (ValueError, ConnectionError, asyncio.IncompleteReadError):
            self.close()
            raise
        if version == b"HTTP/1.0" or headers.get("connection", "").lower() == "close":
            self.close()
        return int(status), answer

    async def hang_up(self, path: str, payload):
        """Send a request and close the connection before the answer comes."""
        _, writer = await asyncio.open_connection("127.0.0.1", self.port)
        writer.write(http_request("POST", path, payload, self.headers))
        await writer.drain()
        writer.close()

    def close(self):
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def wait_up(port: int, process, timeout: float = 120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server on port {port} exited with {process.returncode}")
        connection = Connection(port)
        try:
            if (await connection.request("GET", "/health"))[0] == 200:
                return
        except (OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            connection.close()
        await asyncio.sleep(0.3)
    raise TimeoutError(f"the server on port {port} did not come up in {timeout:.0f} s")


async def load(port: int, sentences: list[str], clients: int, requests: int, seconds: float):
    """(requests/s, sorted latencies, answers by sentence index, non-200 count) of one run."""
    latencies, answers, failed, sent = [], {}, 0, 0
    deadline = time.perf_counter() + seconds

    async def one_client():
        nonlocal sent, failed
        connection = Connection(port)
        while sent < requests and time.perf_counter() < deadline:
            i = sent % len(sentences)
            sent += 1
            start = time.perf_counter()
            try:
                status, answer = await connection.request("POST", "/v1/classify", {"inputs": sentences[i]})
            except (OSError, ValueError, asyncio.IncompleteReadError):  # refused or reset: counted as non-200
                failed += 1
                continue
            latencies.append(time.perf_counter() - start)
            if status == 200:
                answers[i] = json.loads(answer)[0]["label"]
            else:
                failed += 1
        connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_client() for _ in range(clients)))
    return len(latencies) / (time.perf_counter() - started), sorted(latencies), answers, failed


def percentile(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(p / 100 * len(sorted_values)))]


async def bench(args, sentences, expected):
    names = ["transformers", "bertforge", "bertforge-int8"] + (["onnx", "onnx-int8"] if args.onnx else [])
    names += [f"{n}-w2" for n in names[1:]]  # the same with --workers 2: only when asked for by --only
    names = [n for n in names if n in args.only] if args.only else [n for n in names if not n.endswith("-w2")]
    runs = {}  # (name, clients) -> [(rate, p50, p95, p99)], one per repetition
    for rep in range(args.reps):  # the servers interleaved: A B C, A B C, ...
        for name in names:
            port = free_port()
            process = start(name, args, port)
            try:
                await wait_up(port, process)
                await load(port, sentences, 8, 32, 60)  # warm-up
                for clients in CLIENTS:
                    rate, lat, answers, failed = await load(port, sentences, clients, args.requests, args.seconds)
                    agree = sum(answers[i] == expected[i] for i in answers) / max(1, len(answers))
                    tail = [percentile(lat, q) * 1e3 for q in (50, 95, 99)]
                    runs.setdefault((name, clients), []).append((rate, *tail))
                    print(f"[{rep + 1}/{args.reps}] {name:>15} {clients:>3} clients: {rate:7.1f} req/s  "
                          f"p50 {tail[0]:7.1f} ms  p95 {tail[1]:7.1f} ms  p99 {tail[2]:7.1f} ms  non-200 {failed}  "
                          f"labels as offline {agree:.1%}", flush=True)
            finally:
                process.terminate()
                process.wait(timeout=60)
    print(f"medians of {args.reps}:")
    medians = {key: [common.median(column) for column in zip(*values)] for key, values in runs.items()}
    for (name, clients), (rate, p50, p95, p99) in medians.items():
        print(f"{name:>15} {clients:>3} clients: {rate:7.1f} req/s  p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  "
              f"p99 {p99:7.1f} ms")
    top = CLIENTS[-1]
    if "transformers" in names:
        for name in names:
            print(f"{name:>15} / transformers, {top} clients: "
                  f"{medians[name, top][0] / medians['transformers', top][0]:.2f}")
    if {"transformers", "bertforge", "bertforge-int8"} - set(names):
        return
    print(f"ratio={medians['bertforge', top][0] / medians['transformers', top][0]:.2f} "
          f"(bertforge fp32 / transformers, {top} clients); "
          f"int8_ratio={medians['bertforge-int8', top][0] / medians['bertforge', top][0]:.2f}")


BAD = [b"{not json", {"inputs": ""}, {"inputs": 5}, {"inputs": "word " * 600}, {"inputs": []}, {"input": "x"}]


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def soak(args, sentences, expected):
    """--soak N: N requests from 16 clients, 1% malformed, oversized or empty, and now and then a client that
    hangs up mid-request; every good answer checked, every bad one a 4xx with a message, the server's resident
    memory after each tenth of the requests (the first tenth is the warm-up) and at the end. The server is
    `bertforge` or the first name given to --only."""
    port = free_port()
    process = start(args.only[0] if args.only else "bertforge", args, port)
    tally = {"good_right": 0, "good_wrong": 0, "bad_4xx": 0, "bad_other": 0, "5xx": 0, "hung_up": 0}
    sent, memory = 0, {}
    try:
        await wait_up(port, process)

        async def one_client():
            nonlocal sent
            connection = Connection(port)
            while sent < args.soak:
                k = sent
                sent += 1
                if k and k % (args.soak // 10) == 0:  # after each tenth; the first is the warm-up
                    memory[f"at {k}"] = rss_mb(process.pid)
                if k % 100 == 50:
                    status, answer = await connection.request("POST", "/v1/classify", BAD[(k // 100) % len(BAD)])
                    tally["5xx"] += status >= 500
                    ok = 400 <= status < 500 and json.loads(answer).get("error")
                    tally["bad_4xx" if ok else "bad_other"] += 1
                    continue
                i = k % len(sentences)
                if k % 500 == 7:
                    await connection.hang_up("/v1/classify", {"inputs": sentences[i]})
                    tally["hung_up"] += 1
                    continue
                status, answer = await connection.request("POST", "/v1/classify", {"inputs": sentences[i]})
                tally["5xx"] += status >= 500
                right = status == 200 and json.loads(answer)[0]["label"] == expected[i]
                tally["good_right" if right else "good_wrong"] += 1
            connection.close()

        started = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(16)))
        memory["end"] = rss_mb(process.pid)
        elapsed = time.perf_counter() - started
    finally:
        process.terminate()
        process.wait(timeout=60)
    print(f"soak: {args.soak} requests in {elapsed:.0f} s; " + ", ".join(f"{k} {v}" for k, v in tally.items())
          + "; server RSS " + ", ".join(f"{k} {v:.0f} MB" for k, v in memory.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a text-classification checkpoint folder (required)")
    p.add_argument("--onnx", help="its `bertforge export onnx --int8` folder: adds the ONNX servers")
    p.add_argument("--requests", type=int, default=2000, help="requests per run (each client count)")
    p.add_argument("--seconds", type=float, default=60, help="time limit per run")
    p.add_argument("--reps", type=int, default=3, help="rounds of all the servers, interleaved; figures are medians")
    p.add_argument("--threads", type=int, default=common.THREADS)
    p.add_argument("--quick", action="store_true", help="100 requests, 20 s per run")
    p.add_argument("--only", nargs="+", help="these servers only (transformers, bertforge, bertforge-int8, onnx, "
                                             "onnx-int8; NAME-w2: the bertforge server NAME with --workers 2)")
    p.add_argument("--soak", type=int, help="instead: a reliability run of this many requests against bertforge "
                                            "or the first --only server (see soak)")
    p.add_argument("--plain-server", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.plain_server:
        return plain_server(args.plain_server, args.port, args.threads)
    if args.model is None:
        p.error("--model is required")
    if args.quick:
        args.requests, args.seconds, args.reps = 100, 20, 1
    common.setup(args.threads)
    print(common.machine())
    import bertforge

    sentences = sst2_sentences()
    expected = [r["label"] for r in bertforge.pipeline("text-classification", model=args.model, max_length=128)(
        sentences)]
    asyncio.run(soak(args, sentences, expected) if args.soak else bench(args, sentences, expected))


if __name__ == "__main__":
    main()
