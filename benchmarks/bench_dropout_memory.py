"""Peak memory of one BERT-Base pre-training step with dropout on (forward, backward, AdamW step), each
configuration in a fresh process: batch x length, with or without gradient checkpointing.

`--code DIR` runs another checkout's bertforge (e.g. a worktree of the previous commit) for a before/after
comparison on the same machine. A child is capped at --limit-gb of address space: a step that needs more
reports "over" instead of pressing the machine into swap or the OOM killer.

    python3 -m benchmarks.bench_dropout_memory [--shapes 32x128 32x512] [--checkpointing both] [--code DIR]
"""

import argparse
import json
import resource
import subprocess
import sys
import time

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads


def step(args):
    """In the child: one step; prints peak_rss_mb, baseline_mb and seconds."""
    resource.setrlimit(resource.RLIMIT_AS, (int(args.limit_gb * 2 ** 30),) * 2)
    if args.code:
        sys.path.insert(0, args.code)
    import torch

    from bertforge import BertConfig, BertForPreTraining

    common.setup(args.threads)
    batch, length = map(int, args.shape.split("x"))
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig.from_name("base")).train()
    if args.checkpointing:
        model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = common.pretraining_batch(batch, length, realistic=False)
    baseline = common.rss_mb()
    start = time.perf_counter()
    model(**data).loss.backward()
    optimizer.step()
    print(f"seconds={time.perf_counter() - start:.1f} {common.child_memory_line(baseline)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=["32x128", "32x512"])
    p.add_argument("--checkpointing", choices=["off", "on", "both"], default="both")
    p.add_argument("--code", help="a checkout whose bertforge to run (default: this one)")
    p.add_argument("--limit-gb", type=float, default=14.0)
    p.add_argument("--threads", type=int, default=common.THREADS)
    p.add_argument("--shape", help=argparse.SUPPRESS)  # the child's
    args = p.parse_args()
    if args.shape:
        args.checkpointing = args.checkpointing == "on"
        return step(args)
    print(common.machine())
    results = []
    for shape in args.shapes:
        for checkpointing in (["off", "on"] if args.checkpointing == "both" else [args.checkpointing]):
            child = ["--shape", shape, "--checkpointing", checkpointing, "--limit-gb", str(args.limit_gb),
                     "--threads", str(args.threads), *(["--code", args.code] if args.code else [])]
            try:
                got = common.run_child("benchmarks.bench_dropout_memory", child, timeout=1200)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                got = {"failed": str(e).strip().splitlines()[-1][:200]}
            results.append({"shape": shape, "checkpointing": checkpointing, **got})
            print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
