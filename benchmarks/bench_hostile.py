"""Soak under hostile traffic on 127.0.0.1: `bertforge serve` answering good clients while hostile ones attack it.

One server (started with an API key, which the good clients send), two phases of --seconds each with the same
good load: --clients clients, each sending one SST-2 dev sentence per request to /v1/classify, every answer
checked against the offline `bertforge.pipeline` prediction of that sentence (same label, score within 1e-3).
Phase "good" has only them; phase "hostile" mixes in, from --hostile-workers clients in turn: inputs near the
4 MiB body limit with "truncate" (a text, and a QA-like [question, context] pair) and without, a body declared or
sent chunked over the limit, a lone surrogate, malformed JSON, a wrong Host header, no or a wrong API key, and
clients that hang up after their request or in the middle of its body; and, held open for --stall seconds,
--stallers connections of each kind: headers then part of a body then nothing (slow body), part of the headers
(slow headers), nothing at all (silent). Reported: the good answers right (count, share), p50/p99 latency of
the good requests in each phase and their ratio, what each kind of hostile request got (status and error_type,
or what happened to its connection), the server's RSS sampled every half second (start, max, end), the 5xx
count (clients' and /metrics'), /health after the attack, whether the server is still alive, its tracebacks
logged, and how long SIGTERM takes to stop it. A JSON summary, then `ok=<true|false>`: every good answer right,
no 5xx, each refusal the one expected, every stalled connection closed by the server before the end of its stall
(slow headers and silent ones after --header-timeout, a slow body with a 408 after --body-timeout: both 10 s by
default, under the default --stall), the server alive and answering /health, no traceback in its log.

    python3 -m benchmarks.bench_hostile                     # all-MiniLM-L6-v2 with a random 2-label head, ~3 min
    python3 -m benchmarks.bench_hostile --model RUN/best    # a text-classification checkpoint of your own

Without --model, the model is all-MiniLM-L6-v2's encoder (../shared/models) with a seeded random 2-label head,
its weights scaled so that no sentence sits near a tie, written to a temporary folder: a real model's cost per
request; its labels mean nothing, but the server must give the same ones as the offline pipeline.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_inference import MODEL as MINILM, sst2_sentences
from benchmarks.bench_serve import Connection, free_port, http_request, percentile, rss_mb, wait_up
from bertforge.serving.guard import MAX_BODY

KEY = "soak-test-key"
AUTH = {"authorization": f"Bearer {KEY}"}
MAX_LENGTH = 128
TIMEOUT = 120  # seconds a client waits for an answer before counting it as none
HUGE = "word " * ((MAX_BODY - 200) // 5)  # a text whose request body is just under the limit


def classifier_folder(folder: Path) -> Path:
    """all-MiniLM-L6-v2 with a seeded random 2-label head (x50: labels far from ties), saved to `folder`."""
    import torch

    from bertforge import BertForSequenceClassification
    from bertforge.text.tokenizer import BertTokenizer

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(MINILM, id2label={0: "negative", 1: "positive"})
    with torch.no_grad():
        model.classifier.weight.mul_(50)
    model.save_pretrained(folder, BertTokenizer.from_pretrained(MINILM))
    return folder


def start_server(model: str, port: int, threads: int, log: Path) -> subprocess.Popen:
    """`bertforge serve` with the API key (from the environment: not in the process list), its output to `log`."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(common.REPO), "BERTFORGE_API_KEY": KEY}
    command = [sys.executable, "-m", "bertforge", "serve", model, "--port", str(port),
               "--max-input-tokens", str(MAX_LENGTH)]
    with open(log, "wb") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)


def outcome(status: int, answer: bytes) -> str:
    """'200', or a refusal's status and error_type ('413 too_large'); 'STATUS non-JSON' if its body is not JSON."""
    if status == 200:
        return "200"
    try:
        return f"{status} {json.loads(answer).get('error_type')}"
    except (ValueError, AttributeError):
        return f"{status} non-JSON"


async def ask(port: int, payload, headers: dict | None = None, path: str = "/v1/classify") -> str:
    """One request on a new connection: its outcome, or what became of the connection."""
    connection = Connection(port, {**AUTH, **(headers or {})})
    try:
        return outcome(*await asyncio.wait_for(connection.request("POST", path, payload), TIMEOUT))
    except asyncio.TimeoutError:
        return f"no answer in {TIMEOUT} s"
    except asyncio.IncompleteReadError:
        return "closed without an answer"
    except (ConnectionError, ValueError):
        return "reset"
    finally:
        connection.close()


def chunked(size: int) -> bytes:
    """A chunked body of `size` bytes of blanks, without the last chunk: a stream that has not ended."""
    chunk = b" " * 65536
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(size // len(chunk) + 1))


async def hang_up(port: int, whole: bool) -> str:
    """A client that closes its connection after sending its request (whole) or half of its body."""
    connection = Connection(port, AUTH)
    if whole:
        await connection.hang_up("/v1/classify", {"inputs": "a client that will not wait"})
    else:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(http_request("POST", "/v1/classify", b'{"inputs": "half', {**AUTH, "content-length": "40"}))
        await writer.drain()
        writer.close()
    return "hung up"


KINDS = {  # kind -> (its request, the outcomes expected)
    "huge_text_truncate": (lambda port: ask(port, {"inputs": HUGE, "truncate": True}), {"200"}),
    "huge_pair_truncate": (lambda port: ask(port, {"inputs": [["What is it?", HUGE[:-40]]], "truncate": True}),
                           {"200"}),
    "huge_text": (lambda port: ask(port, {"inputs": HUGE}), {"413 too_large"}),
    "declared_over_limit": (lambda port: ask(port, b"", {"content-length": str(MAX_BODY + 1)}), {"413 too_large"}),
    "chunked_over_limit": (lambda port: ask(port, chunked(MAX_BODY), {"transfer-encoding": "chunked",
                                                                      "content-length": None}), {"413 too_large"}),
    "lone_surrogate": (lambda port: ask(port, b'{"inputs": ["fine", "caf\\ud800"]}'), {"422 validation"}),
    "malformed_json": (lambda port: ask(port, b'{"inputs": "unclosed'), {"422 validation"}),
    "wrong_host": (lambda port: ask(port, {"inputs": "a"}, {"host": "evil.example"}), {"421 misdirected"}),
    "no_api_key": (lambda port: ask(port, {"inputs": "a"}, {"authorization": None}), {"401 unauthorized"}),
    "wrong_api_key": (lambda port: ask(port, {"inputs": "a"}, {"authorization": "Bearer guess"}),
                      {"401 unauthorized"}),
    "hang_up_after_request": (lambda port: hang_up(port, True), {"hung up"}),
    "hang_up_mid_body": (lambda port: hang_up(port, False), {"hung up"}),
}
STALLS = {  # kind -> the bytes a client sends before it stalls
    "slow_body": http_request("POST", "/v1/classify", b'{"inputs": "sl', {**AUTH, "content-length": "1000"}),
    "slow_headers": b"POST /v1/classify HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-ty",
    "silent": b"",
}
STALL_EXPECTED = {"closed by the server", "408 timeout"}  # not held open for the whole stall


async def stall(port: int, sent: bytes, seconds: float) -> tuple[str, float]:
    """A connection that sends `sent` then nothing for `seconds`: what the server did, and after how long."""
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as e:
        return f"cannot connect ({type(e).__name__})", 0.0
    try:
        writer.write(sent)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), seconds)
        after = time.perf_counter() - started
        if not data:
            return "closed by the server", after
        data += await asyncio.wait_for(reader.read(), 5)  # the rest of the answer: a refusal closes the connection
        head, _, body = data.partition(b"\r\n\r\n")
        return outcome(int(head.split(b" ", 2)[1]), body), after
    except asyncio.TimeoutError:
        return f"still open after {seconds:.0f} s", time.perf_counter() - started
    except ConnectionError:
        return "reset", time.perf_counter() - started
    finally:
        writer.close()


async def good_client(port: int, sentences, expected, deadline: float, first: int, tally: dict):
    """Sentences from `first` on, one per request, until the deadline; latency and rightness of each."""
    connection, i = Connection(port, AUTH), first
    while time.perf_counter() < deadline:
        k, i = i % len(sentences), i + 1
        started = time.perf_counter()
        try:
            status, answer = await asyncio.wait_for(
                connection.request("POST", "/v1/classify", {"inputs": sentences[k]}), TIMEOUT)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError, ValueError) as e:
            tally["statuses"][type(e).__name__] += 1
            connection.close()
            continue
        tally["latencies"].append(time.perf_counter() - started)
        tally["statuses"][outcome(status, answer)] += 1
        got = json.loads(answer)[0] if status == 200 else {}
        tally["right"] += got.get("label") == expected[k]["label"] and abs(got["score"] - expected[k]["score"]) < 1e-3
    connection.close()


async def hostile_worker(port: int, deadline: float, first: int, outcomes: dict):
    """The kinds of KINDS in turn, from the `first`, until the deadline."""
    names, i = list(KINDS), first
    while time.perf_counter() < deadline:
        name, i = names[i % len(names)], i + 1
        outcomes[name][await KINDS[name][0](port)] += 1
        await asyncio.sleep(0.05)


async def staller(port: int, sent: bytes, seconds: float, deadline: float, outcomes: Counter, held: list):
    """Stalled connections, one after the other, while a whole stall fits before the deadline."""
    while time.perf_counter() + seconds <= deadline:
        result, after = await stall(port, sent, seconds)
        outcomes[result] += 1
        held.append(after)
        await asyncio.sleep(0.1)


def phase_summary(tally: dict) -> dict:
    latencies, done = sorted(tally["latencies"]), sum(tally["statuses"].values())
    return {"requests": done, "right": tally["right"], "right_share": round(tally["right"] / max(1, done), 4),
            "p50_ms": round(percentile(latencies, 50) * 1e3, 1) if latencies else None,
            "p99_ms": round(percentile(latencies, 99) * 1e3, 1) if latencies else None,
            "requests_per_s": round(done / tally["seconds"], 1), "statuses": dict(tally["statuses"])}


async def phase(port: int, args, sentences, expected, hostile: bool) -> dict:
    """One phase: the good clients for --seconds, with the hostile ones when `hostile`."""
    tally = {"latencies": [], "statuses": Counter(), "right": 0, "seconds": args.seconds}
    deadline = time.perf_counter() + args.seconds
    tasks = [good_client(port, sentences, expected, deadline, c * len(sentences) // args.clients, tally)
             for c in range(args.clients)]
    outcomes, held = {name: Counter() for name in [*KINDS, *STALLS]}, {name: [] for name in STALLS}
    if hostile:
        tasks += [hostile_worker(port, deadline, w * 5, outcomes) for w in range(args.hostile_workers)]
        tasks += [staller(port, sent, args.stall, deadline, outcomes[name], held[name])
                  for name, sent in STALLS.items() for _ in range(args.stallers)]
    await asyncio.gather(*tasks)
    summary = {"good": phase_summary(tally)}
    if hostile:
        summary["hostile"] = {name: {"outcomes": dict(outcomes[name]), "expected": sorted(KINDS[name][1])}
                              for name in KINDS}
        summary["hostile"].update({name: {"outcomes": dict(outcomes[name]), "expected": sorted(STALL_EXPECTED),
                                          "held_s_max": round(max(held[name], default=0), 1)} for name in STALLS})
    return summary


async def sample_rss(pid: int, samples: list, every: float = 0.5):
    """The server's RSS (MB) every `every` seconds, until cancelled."""
    while True:
        try:
            samples.append(rss_mb(pid))
        except OSError:  # the process is gone
            return
        await asyncio.sleep(every)


def metric_sums(text: str) -> dict:
    """From /metrics: requests by status, errors by kind."""
    sums = {"requests": Counter(), "errors": Counter()}
    for name, labels, value in re.findall(r'^bertforge_(requests|errors)_total\{(.*)\} (\S+)$', text, re.M):
        key = re.search(r'status="(\d+)"' if name == "requests" else r'kind="([^"]+)"', labels).group(1)
        sums[name][key] += int(float(value))
    return {k: dict(v) for k, v in sums.items()}


async def after_attack(port: int) -> dict:
    """/health (no key needed) and /metrics (with the key) once the attack is over."""
    health, metrics = Connection(port), Connection(port, AUTH)
    try:
        status, _ = await asyncio.wait_for(health.request("GET", "/health"), 30)
        _, text = await asyncio.wait_for(metrics.request("GET", "/metrics"), 30)
    finally:
        health.close()
        metrics.close()
    return {"health": status, "metrics": metric_sums(text.decode())}


def stop(process: subprocess.Popen) -> float | None:
    """SIGTERM, and the seconds the server took to exit (None: it did not within a minute, and was killed)."""
    started = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        return None
    return round(time.perf_counter() - started, 1)


async def soak(args, model: str, sentences, expected, log: Path) -> dict:
    """Start the server, warm it up, run both phases, sampling its RSS; what it looks like afterwards."""
    port = free_port()
    process = start_server(model, port, args.threads, log)
    rss, report = [], {}
    try:
        await wait_up(port, process)
        warm = {"latencies": [], "statuses": Counter(), "right": 0}
        await asyncio.gather(*(good_client(port, sentences, expected, time.perf_counter() + 3, c * 100, warm)
                               for c in range(args.clients)))
        sampler = asyncio.ensure_future(sample_rss(process.pid, rss))
        report["phases"] = {name: await phase(port, args, sentences, expected, name == "hostile")
                            for name in ("good", "hostile")}
        await asyncio.sleep(2)  # the last stalled connections closed, the last batches run
        report["rss_mb"] = {"start": round(rss[0]), "max": round(max(rss)), "end": round(rss_mb(process.pid)),
                            "samples": len(rss)}
        sampler.cancel()
        report.update(await after_attack(port))
        report["alive"] = process.poll() is None
    finally:
        report["shutdown_s"] = stop(process) if process.poll() is None else None
    report["tracebacks_logged"] = log.read_text(errors="replace").count("Traceback")
    return report


def verdict(report: dict) -> dict:
    """The figures that decide ok, added to the report; and ok itself."""
    good, hostile = report["phases"]["good"]["good"], report["phases"]["hostile"]
    seen = [*good["statuses"], *hostile["good"]["statuses"],
            *(o for kind in hostile["hostile"].values() for o in kind["outcomes"])]
    report["5xx"] = {"clients": sum(o[0] == "5" for o in seen),
                     "metrics": sum(n for s, n in report["metrics"]["requests"].items() if s.startswith("5"))}
    ratios = {q: round(hostile["good"][f"{q}_ms"] / good[f"{q}_ms"], 2) for q in ("p50", "p99")
              if good[f"{q}_ms"] and hostile["good"][f"{q}_ms"]}
    report["latency_ratio_hostile_over_good"] = ratios
    kinds_ok = {name: bool(kind["outcomes"]) and set(kind["outcomes"]) <= set(kind["expected"])
                for name, kind in hostile["hostile"].items()}
    report["as_expected"] = kinds_ok
    checks = {"good_all_right": all(p["requests"] and p["right"] == p["requests"] for p in (good, hostile["good"])),
              "no_5xx": not any(report["5xx"].values()), "alive": report["alive"], "health": report["health"] == 200,
              "refusals_as_expected": all(kinds_ok[name] for name in KINDS),
              "stalled_connections_closed": all(kinds_ok[name] for name in STALLS),
              "no_tracebacks": not report["tracebacks_logged"]}
    report["checks"] = checks
    return all(checks.values())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a text-classification checkpoint folder (default: all-MiniLM-L6-v2 with a "
                                   "random 2-label head, built in a temporary folder)")
    p.add_argument("--seconds", type=float, default=40, help="length of each phase")
    p.add_argument("--clients", type=int, default=8, help="good clients, in both phases")
    p.add_argument("--hostile-workers", type=int, default=2, help="clients sending hostile requests in turn")
    p.add_argument("--stallers", type=int, default=16, help="stalled connections held at once, of each kind")
    p.add_argument("--stall", type=float, default=15, help="seconds a stalled connection waits for the server")
    p.add_argument("--threads", type=int, default=common.THREADS, help="the server's torch threads")
    args = p.parse_args()
    common.setup(args.threads)
    print(f"machine: {common.machine()}", flush=True)
    import bertforge

    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as tmp:
        model = args.model or str(classifier_folder(Path(tmp) / "model"))
        sentences = sst2_sentences()
        expected = bertforge.pipeline("text-classification", model=model, max_length=MAX_LENGTH)(sentences)
        report = {"model": Path(args.model).name if args.model else "all-MiniLM-L6-v2 + random head",
                  "settings": {k: v for k, v in vars(args).items() if k != "model"}}
        report.update(asyncio.run(soak(args, model, sentences, expected, Path(tmp) / "server.log")))
    ok = verdict(report)
    print(json.dumps(report, indent=1))
    print(f"ok={str(ok).lower()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
