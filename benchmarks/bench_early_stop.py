"""The adaptive recipe's early stopping against running every epoch it plans: `bertforge finetune` and
`bertforge distill --student tiny` on a few rows of one's own data (the first `--rows` SST-2 training sentences as a
CSV, the first `--dev-rows` dev sentences as its dev file), all-MiniLM-L6-v2 as the model and, fine-tuned there,
as the teacher. Each seed runs the default (its patience) and `--patience 0` (every planned epoch); a run stopped
early follows the same trajectory as the full one up to its stop, so the two agree on the best epoch's score
whenever it comes before the stop.

    python -m benchmarks.bench_early_stop [--rows 180] [--seeds 1 2 3]

A markdown row per job and seed: wall seconds and best dev accuracy (its epoch) of each, the epochs run.
"""

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

MODEL = common.SHARED / "models" / "all-MiniLM-L6-v2"
SST2 = common.SHARED / "data" / "glue" / "SST-2"


def write_rows(source: Path, target: Path, count: int) -> None:
    with open(source, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:count]
    with open(target, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["sentence", "label"])
        writer.writerows([(r["sentence"], r["label"]) for r in rows])


def timed(argv: list[str], out: Path) -> dict:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "bertforge", *argv, "--out", str(out), "--no-progress"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    results = json.loads((out / "eval_results.json").read_text())
    evaluations = sum(1 for line in (out / "metrics.jsonl").read_text().splitlines() if '"accuracy"' in line)
    return {"s": seconds, "accuracy": results["accuracy"], "best_epoch": results.get("epoch_of_best"),
            "epochs": evaluations, "planned": json.loads((out / "args.json").read_text())["extra"]["epochs"]}


def cache(job: str, folder: Path) -> list[str]:
    return ["--cache-dir", str(folder)] if job.startswith("distill") else []


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=180)
    p.add_argument("--dev-rows", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = p.parse_args()
    print(common.machine())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        write_rows(SST2 / "train.tsv", tmp / "train.csv", args.rows)
        write_rows(SST2 / "dev.tsv", tmp / "dev.csv", args.dev_rows)
        data = ["--train", str(tmp / "train.csv"), "--dev", str(tmp / "dev.csv"), "--text-column", "sentence",
                "--label-column", "label"]
        print("| job | seed | default: s, accuracy (best epoch), epochs run of planned | --patience 0: s, accuracy "
              "(best epoch), epochs | time saved |\n|---|---|---|---|---|")
        for seed in args.seeds:
            finetune = ["finetune", "text-classification", "--model", str(MODEL), *data, "--seed", str(seed)]
            teacher = tmp / f"teacher-{seed}"
            jobs = {"finetune": finetune,
                    "distill --student tiny": ["distill", "text-classification", "--teacher", str(teacher / "best"),
                                               "--student", "tiny", *data, "--seed", str(seed)]}
            for job, argv in jobs.items():
                # each distillation its own cache: both compute the teacher's outputs
                default = timed([*argv, *cache(job, tmp / f"cache-{seed}")],
                                teacher if job == "finetune" else tmp / f"distill-{seed}")
                full = timed([*argv, "--patience", "0", *cache(job, tmp / f"cache-{seed}-full")],
                             tmp / f"{job.split()[0]}-{seed}-full")
                print(f"| {job} | {seed} | {default['s']:.0f} s, {default['accuracy']:.4f} ({default['best_epoch']}), "
                      f"{default['epochs']} of {default['planned']:g} | {full['s']:.0f} s, {full['accuracy']:.4f} "
                      f"({full['best_epoch']}), {full['epochs']} | {1 - default['s'] / full['s']:.0%} |", flush=True)


if __name__ == "__main__":
    main()
