"""Inference rate of models against the first of them (distilled students against their teacher): examples/s on a
task's first evaluation split, timed as `bertforge evaluate` times its speed line (`finetuning.evaluate.Speed`),
the same batches and threads, repetitions interleaved (teacher, student 1, student 2, teacher, ...); medians.

    python3 -m benchmarks.bench_distill --task sst2 --data ../shared/data/glue/SST-2 \
        --models runs/teacher/best runs/mini/best runs/tiny/best

Per model a JSON line (examples/s, its ratio to the first model's, parameters, bytes on disk, dev scores) and a
speed line; the last line is `ratio=<last model's rate / first's>`.
"""

import argparse
import json
import statistics

from benchmarks.common import THREADS, machine, setup

import torch  # noqa: F401  (after common: its thread settings apply)

from bertforge.finetuning.evaluate import Speed, model_figures, speed_line
from bertforge.tasks import make_family
from bertforge.text.tokenizer import BertTokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="sst2")
    p.add_argument("--data", required=True, help="the task's data folder")
    p.add_argument("--models", nargs="+", required=True, help="model folders; the first is the reference")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=THREADS)
    p.add_argument("--max-eval-examples", type=int, help="the split's first N examples only")
    args = p.parse_args()
    setup(args.threads)
    print(machine())
    family = make_family(args.task, args.data, reading=True, options={"progress": False})
    loaded = []
    for folder in args.models:
        tokenizer = BertTokenizer.from_pretrained(folder)
        model = family.model_class.from_pretrained(folder)
        split = family.read(family.eval_splits[0], tokenizer, args.max_eval_examples)
        outputs = Speed().predict(family, model, split, args.batch_size, tokenizer.pad_token_id)  # the warm-up
        loaded.append((folder, model, split, tokenizer.pad_token_id, family.score(split, outputs)))
    rates = {folder: [] for folder, *_ in loaded}
    for _ in range(args.reps):
        for folder, model, split, pad_id, _ in loaded:
            speed = Speed()
            speed.predict(family, model, split, args.batch_size, pad_id)
            rates[folder].append(speed.examples_per_s)
    medians = {folder: statistics.median(values) for folder, values in rates.items()}
    first = medians[args.models[0]]
    for folder, model, split, _, scores in loaded:
        figures = model_figures(model, folder, medians[folder], args.batch_size)
        ratio = medians[folder] / first
        print(json.dumps({"model": folder, "split": split.name, "examples": len(split.examples),
                          "layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size, **figures,
                          "vs_first": round(ratio, 2), **{k: round(v, 4) for k, v in scores.items()}}))
        print(f"{folder}: {speed_line(figures)} · {ratio:.2f}x the first")
    print(f"ratio={medians[args.models[-1]] / first:.2f}")

if __name__ == "__main__":
    main()
