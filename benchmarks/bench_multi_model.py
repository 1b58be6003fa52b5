"""Several models behind one `bertforge serve` on 127.0.0.1: the throughput of model A served alone (`bertforge serve
A`) against A beside B (`bertforge serve --model a=A --model b=B`, both loaded), like for like: the same clients,
sentences, thread count and limits. By default B is a second copy of A (all-MiniLM-L6-v2 twice), so that the two
models' shares can be added up; `--second` names another (`--second-route /v1/classify` for a classifier).

The servers are started together (an idle one costs no CPU), warmed up, then each case is run for --seconds,
the cases interleaved in every repetition (alone, beside-idle, ..., beside-busy, alone, ...), medians reported:

- alone: --clients clients on A's /embed, the one-model server of A;
- beside-idle: the same clients on /models/a/embed of the two-model server, B loaded and idle: what hosting B costs A;
- b-alone and b-beside-idle: the same for B (a one-model server of B, and /models/b/... beside an idle A), where B
  is not a copy of A;
- beside-busy: half the clients on /models/a/embed, half on /models/b/...: A's and B's inputs/s, and their sum
  (B a copy of A: the machine's throughput, shared between them).

Every client sends SST-2 dev sentences, --per-request of them a request, until the time is up; non-200 answers are
counted (any fails the run). Beside inputs/s, each case's server CPU time per input (user and system, all its
threads: a figure the other loads of a shared machine disturb less than wall time). The issue's target: each model
within 10% of its one-model throughput. The ratios are medians of each repetition's ratio (its two cases run one
after the other, so that the shared machine's drift cancels): `idle_ratio=` (A beside idle B / A alone),
`b_idle_ratio=` (the same for B) and `busy_ratio=` ((A + B) both busy / A alone, B a copy of A only), the last
lines.

    python3 -m benchmarks.bench_multi_model --seconds 10 --reps 3
    python3 -m benchmarks.bench_multi_model --second RUN/best --second-route /v1/classify
"""

import argparse
import asyncio
import os
import subprocess
import sys
import time

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_embed_servers import cpu_seconds
from benchmarks.bench_inference import sst2_sentences
from benchmarks.bench_serve import Connection, free_port, wait_up

CASES = ("alone", "beside-idle", "b-alone", "b-beside-idle", "beside-busy")


def start(args, port: int, *models: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(common.REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-m", "bertforge", "serve", *models, "--port", str(port),
                             "--max-input-tokens", "128", "--max-concurrent", "4096"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def body(path: str, texts: list[str]) -> dict:
    return {"inputs": [[t] for t in texts] if path.endswith("/predict") else texts}  # TEI's /predict: a batch


async def load(targets: list[tuple[int, str]], sentences: list[str], per_request: int, seconds: float):
    """Inputs/s of each target (port, path), one client per entry of `targets` (a target may repeat), all at once;
    and the non-200 answers."""
    answered = {target: 0 for target in targets}
    failed, sent = 0, 0
    deadline = time.perf_counter() + seconds

    async def one_client(target):
        nonlocal sent, failed
        connection = Connection(target[0])
        while time.perf_counter() < deadline:
            first = (sent * per_request) % len(sentences)
            sent += 1
            try:
                status, _ = await connection.request("POST", target[1], body(target[1], sentences[
                    first:first + per_request] or sentences[:per_request]))
            except (OSError, ValueError, asyncio.IncompleteReadError):
                failed += 1
                continue
            if status == 200:
                answered[target] += per_request
            else:
                failed += 1
        connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_client(target) for target in targets))
    elapsed = time.perf_counter() - started
    return {target: n / elapsed for target, n in answered.items()}, failed, sum(answered.values())


async def bench(args, sentences):
    ports = {"alone": free_port(), "b-alone": free_port(), "beside": free_port()}
    processes = {"alone": start(args, ports["alone"], args.model),
                 "beside": start(args, ports["beside"], "--model", f"a={args.model}", "--model",
                                 f"b={args.second or args.model}")}
    if args.second:
        processes["b-alone"] = start(args, ports["b-alone"], args.second)
    a_alone, a_beside = (ports["alone"], "/embed"), (ports["beside"], "/models/a/embed")
    b_alone, b_beside = (ports["b-alone"], args.second_route), (ports["beside"], f"/models/b{args.second_route}")
    half = max(1, args.clients // 2)
    cases = {"alone": [a_alone] * args.clients, "beside-idle": [a_beside] * args.clients,
             "b-alone": [b_alone] * args.clients, "b-beside-idle": [b_beside] * args.clients,
             "beside-busy": [a_beside] * half + [b_beside] * (args.clients - half or 1)}
    if not args.second:  # B is A: its cases are A's
        del cases["b-alone"], cases["b-beside-idle"]
    runs = {case: [] for case in cases}  # case -> [{target: inputs/s}], one per repetition
    cpu = {case: [] for case in cases}  # case -> [server CPU seconds per input], one per repetition
    process_of = {"alone": "alone", "b-alone": "b-alone"}
    try:
        for name in processes:
            await wait_up(ports[name], processes[name], timeout=300)
        for case in cases:  # warm-up, untimed
            await load(cases[case], sentences, args.per_request, args.warmup)
        for rep in range(args.reps):
            for case in cases:
                pid = processes[process_of.get(case, "beside")].pid
                before = cpu_seconds(pid)
                rates, failed, inputs = await load(cases[case], sentences, args.per_request, args.seconds)
                if failed:
                    raise RuntimeError(f"{case}: {failed} requests failed")
                runs[case].append(rates)
                cpu[case].append((cpu_seconds(pid) - before) / max(1, inputs))
                shown = " ".join(f"{path}={rate:.1f}/s" for (_, path), rate in rates.items())
                print(f"rep {rep + 1} {case:13s} {shown} server_cpu_ms/input={cpu[case][-1] * 1e3:.2f} "
                      f"(load average {os.getloadavg()[0]:.2f})", flush=True)
    finally:
        for process in processes.values():
            process.terminate()
            process.wait(timeout=60)
    return runs, cpu, (a_alone, a_beside, b_alone, b_beside)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(common.SHARED / "models" / "all-MiniLM-L6-v2"), help="model A")
    p.add_argument("--second", help="model B (default: A again, a second copy)")
    p.add_argument("--second-route", default="/embed", help="the route B's clients call, under /models/b")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--per-request", type=int, default=8, help="sentences a request")
    p.add_argument("--seconds", type=float, default=10.0, help="per case and repetition")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of each case before timing")
    p.add_argument("--threads", type=int, default=common.THREADS)
    args = p.parse_args()
    common.setup(args.threads)
    print(common.machine(), flush=True)
    sentences = sst2_sentences(872)
    print(f"{len(sentences)} SST-2 dev sentences, {args.per_request} a request, {args.clients} clients, "
          f"{args.seconds:g} s a case, {args.reps} interleaved repetitions; A {args.model}, B "
          f"{args.second or 'a copy of A'}", flush=True)
    runs, cpu, (a_alone, a_beside, b_alone, b_beside) = asyncio.run(bench(args, sentences))

    def rates(case, target):
        return [r[target] for r in runs[case]]

    def shown(case, target):
        return f"{common.median(rates(case, target)):.1f}"

    def ratio(over, under):  # the median of each repetition's ratio
        return common.median([a / b for a, b in zip(over, under)])

    both = [a + b for a, b in zip(rates("beside-busy", a_beside), rates("beside-busy", b_beside))]
    print(f"median inputs/s: A alone {shown('alone', a_alone)}; A beside B idle {shown('beside-idle', a_beside)}; "
          + (f"B alone {shown('b-alone', b_alone)}; B beside A idle {shown('b-beside-idle', b_beside)}; "
             if args.second else "")
          + f"both busy: A {shown('beside-busy', a_beside)} + B {shown('beside-busy', b_beside)} = "
            f"{common.median(both):.1f}")
    print("median server CPU ms/input: " + ", ".join(f"{case} {common.median(times) * 1e3:.2f}"
                                                     for case, times in cpu.items()))
    print(f"idle_cpu_ratio={ratio(cpu['beside-idle'], cpu['alone']):.3f} (CPU per input of A beside idle B / alone)")
    if args.second:
        print(f"b_idle_cpu_ratio={ratio(cpu['b-beside-idle'], cpu['b-alone']):.3f} (the same for B)")
    print(f"busy_cpu_ratio={ratio(cpu['beside-busy'], cpu['alone']):.3f} (CPU per input, both busy / A alone)")
    print(f"idle_ratio={ratio(rates('beside-idle', a_beside), rates('alone', a_alone)):.3f}")
    if args.second:
        print(f"b_idle_ratio={ratio(rates('b-beside-idle', b_beside), rates('b-alone', b_alone)):.3f}")
    else:
        print(f"busy_ratio={ratio(both, rates('alone', a_alone)):.3f}")


if __name__ == "__main__":
    main()
