"""Inference rate of distilled students against their teacher: examples/s on a task's dev split, the same
batches and threads, timed repetitions interleaved (teacher, student 1, student 2, teacher, ...); medians.

    python3 -m benchmarks.bench_distill --task sst2 --data ../shared/data/glue/SST-2 \
        --models runs/teacher/best runs/mini/best runs/tiny/best

The first model is the reference; the last line is `ratio=<last model's rate / first's>`.
"""

import argparse
import json
import statistics
import time

from benchmarks.common import machine, setup

import torch  # noqa: F401  (after common: its thread settings apply)

from bertforge.finetuning.evaluate import predict_split
from bertforge.tasks import make_family
from bertforge.text.tokenizer import BertTokenizer


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="sst2")
    p.add_argument("--data", required=True)
    p.add_argument("--models", nargs="+", required=True, help="fine-tuned folders; the first is the reference")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    setup()
    print(machine())
    family = make_family(args.task, args.data, reading=True, options={"progress": False})
    loaded = []
    for folder in args.models:
        tokenizer = BertTokenizer.from_pretrained(folder)
        model = family.model_class.from_pretrained(folder)
        split = family.read(family.eval_splits[0], tokenizer)
        outputs = predict_split(family, model, split, args.batch_size, tokenizer.pad_token_id)  # also the warm-up
        loaded.append((folder, model, split, tokenizer.pad_token_id, family.score(split, outputs)))
    times = {folder: [] for folder, *_ in loaded}
    for _ in range(args.reps):
        for folder, model, split, pad_id, _ in loaded:
            began = time.perf_counter()
            predict_split(family, model, split, args.batch_size, pad_id)
            times[folder].append(time.perf_counter() - began)
    rates = {}
    for folder, model, split, _, scores in loaded:
        rates[folder] = len(split.examples) / statistics.median(times[folder])
        print(json.dumps({"model": folder, "parameters": sum(p.numel() for p in model.parameters()),
                          "layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size,
                          "examples_per_s": round(rates[folder], 1),
                          "vs_first": round(rates[folder] / rates[args.models[0]], 2),
                          **{k: round(v, 4) for k, v in scores.items()}}))
    print(f"ratio={rates[args.models[-1]] / rates[args.models[0]]:.2f}")


if __name__ == "__main__":
    main()
