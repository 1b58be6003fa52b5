"""GLUE dev scores: bertforge `finetune` beside transformers' `Trainer`, same checkpoint, data, recipe and seed.

    python -m benchmarks.bench_glue --tasks sst2 mrpc stsb cola [--max-train-examples N] [--epochs 3] [--seed 42]
                                    [--threads T]

Both fine-tune the same checkpoint (default: the shared all-MiniLM-L6-v2) with the paper's recipe (batch 32,
lr 2e-5, 10% warm-up then linear decay, weight decay 0.01, max length 128), evaluate on the dev split after
every epoch and report the best epoch, scored by the same metric code. Prints one line per task and side
with the score and wall time (also appended to OUT/results.jsonl); the last line is
`ratio=<bertforge/transformers>` of the mean score.
"""

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from bertforge.finetuning.finetune import finetune
from bertforge.tasks.glue import encode_glue, glue_task, read_glue
from bertforge.tasks.metrics import GLUE_METRICS, glue_metrics

SHARED = Path(os.environ.get("BERTFORGE_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def run_transformers(task: str, model_dir: Path, glue_dir: Path, args, out: Path) -> dict:
    from transformers import (BertForSequenceClassification, BertTokenizerFast, DataCollatorWithPadding, Trainer,
                              TrainingArguments)

    t = glue_task(task)
    tokenizer = BertTokenizerFast.from_pretrained(model_dir)
    train = read_glue(task, glue_dir, "train")[:args.max_train_examples]
    dev = read_glue(task, glue_dir, "dev")
    as_rows = lambda feats: [dict(zip(feats, values)) for values in zip(*feats.values())]  # noqa: E731
    train_rows = as_rows(encode_glue(train, tokenizer, 128))
    dev_rows = as_rows(encode_glue(dev, tokenizer, 128))
    if t.labels is None:  # regression targets must be floats
        for row in train_rows + dev_rows:
            row["labels"] = float(row["labels"])
    model = BertForSequenceClassification.from_pretrained(model_dir, num_labels=t.num_labels)
    history = []

    def compute_metrics(prediction):
        logits = prediction.predictions
        preds = logits[:, 0] if t.labels is None else logits.argmax(-1)
        history.append(glue_metrics(task, preds, np.array([e.label for e in dev])))
        return history[-1]

    training = TrainingArguments(
        output_dir=str(out), per_device_train_batch_size=32, per_device_eval_batch_size=64, learning_rate=args.lr,
        num_train_epochs=args.epochs, warmup_steps=0.1, weight_decay=0.01, adam_epsilon=1e-6, seed=args.seed,
        eval_strategy="epoch", save_strategy="no", report_to="none", use_cpu=True, logging_steps=50)
    Trainer(model=model, args=training, train_dataset=train_rows, eval_dataset=dev_rows,
            data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=compute_metrics).train()
    metric = GLUE_METRICS[task][0]
    return max(history, key=lambda m: m[metric])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=["sst2", "mrpc", "stsb", "cola"])
    p.add_argument("--model", type=Path, default=SHARED / "models" / "all-MiniLM-L6-v2")
    p.add_argument("--glue", type=Path, default=SHARED / "data" / "glue")
    p.add_argument("--max-train-examples", type=int)
    p.add_argument("--epochs", type=float, default=3)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", type=Path, default=Path("runs/bench_glue"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)

    ours_scores, theirs_scores = [], []
    for task in args.tasks:
        metric = GLUE_METRICS[task][0]
        t0 = time.perf_counter()
        ours = finetune(task, args.model, args.glue / glue_task(task).folder, args.out / f"bertforge-{task}",
                        epochs=args.epochs, lr=args.lr, batch_size=32, max_train_examples=args.max_train_examples,
                        seed=args.seed, progress=False)
        t1 = time.perf_counter()
        theirs = run_transformers(task, args.model, args.glue, args, args.out / f"transformers-{task}")
        t2 = time.perf_counter()
        ours_scores.append(ours[metric])
        theirs_scores.append(theirs[metric])
        line = json.dumps({"task": task, "metric": metric, "bertforge": round(ours[metric], 4),
                           "transformers": round(theirs[metric], 4), "bertforge_s": round(t1 - t0),
                           "transformers_s": round(t2 - t1), "train_examples": ours["train_examples"],
                           "epochs": args.epochs, "seed": args.seed, "threads": args.threads})
        print(line, flush=True)
        with open(args.out / "results.jsonl", "a") as f:
            f.write(line + "\n")
    print(f"ratio={np.mean(ours_scores) / np.mean(theirs_scores):.3f}")


if __name__ == "__main__":
    main()
