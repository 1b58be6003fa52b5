"""Fine-tuning speed: an SST-2 epoch from all-MiniLM-L6-v2, bertforge vs transformers' Trainer.

The same recipe for both: lr 2e-5, batch 32, max length 128, 1 epoch, seed 42, warm-up 10% then linear decay,
AdamW (weight decay 0.01 off biases and LayerNorm, eps 1e-6, fused), gradient clipping 1.0, fp32, no
evaluation during training, nothing saved by transformers. bertforge runs
`bertforge.finetuning.finetune.finetune("sst2",
...)` as a user would (length-grouped batches; it also evaluates once at the end of the epoch and writes its
checkpoints); transformers runs `Trainer` with `DataCollatorWithPadding` (dynamic padding, random order),
`report_to="none"`, `use_cpu=True`, `save_strategy="no"`, then `Trainer.predict` on the dev set.

Each run is its own process (so each has its own peak RSS), and runs alternate bf, hf, bf, hf ... (`--reps`).
`train_s` is the training loop alone: transformers' `train_runtime`; bertforge's `fit` minus its end-of-epoch
evaluation and checkpoint writes. `total_s` is the whole call, tokenisation and model loading included.

    python3 -m benchmarks.bench_finetune --quick            # 512 examples
    python3 -m benchmarks.bench_finetune --examples 4096    # the default
    python3 -m benchmarks.bench_finetune --examples 0       # the whole epoch (67,349 examples: hours here)

The last line is `ratio=<bertforge/transformers>` of training examples/s.
"""

import argparse
import sys
import tempfile
import time

from benchmarks import common

MODEL = common.SHARED / "models" / "all-MiniLM-L6-v2"
GLUE = common.SHARED / "data" / "glue"
RECIPE = dict(lr=2e-5, batch_size=32, max_length=128, epochs=1, seed=42, warmup=0.1, weight_decay=0.01,
              adam_eps=1e-6)


def run_bertforge(examples: int | None, eval_examples: int | None, out: str) -> dict:
    import bertforge.finetuning.finetune as ft
    import bertforge.training.train as tr

    spent = {"eval": 0.0, "save": 0.0, "fit": 0.0}

    def timed(fn, key):
        def wrapper(*a, **k):
            start = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[key] += time.perf_counter() - start
        return wrapper

    ft.evaluate_job = timed(ft.evaluate_job, "eval")
    ft.fit = timed(ft.fit, "fit")
    tr.Checkpointer.save = timed(tr.Checkpointer.save, "save")
    start = time.perf_counter()
    r = RECIPE
    result = ft.finetune("sst2", MODEL, GLUE, out, epochs=r["epochs"], lr=r["lr"], batch_size=r["batch_size"],
                         max_length=r["max_length"], max_train_examples=examples, max_eval_examples=eval_examples,
                         seed=r["seed"], warmup=r["warmup"], progress=False)
    total = time.perf_counter() - start
    return dict(train_s=spent["fit"] - spent["eval"] - spent["save"], total_s=total,
                examples=result["train_examples"], accuracy=result["accuracy"])


def run_transformers(examples: int | None, eval_examples: int | None, out: str) -> dict:
    import numpy as np
    import transformers
    from transformers import (AutoTokenizer, BertForSequenceClassification, DataCollatorWithPadding, Trainer,
                              TrainingArguments)

    from bertforge.tasks.glue import read_glue

    start = time.perf_counter()
    r = RECIPE
    tokenizer = AutoTokenizer.from_pretrained(MODEL)

    def dataset(split, limit):
        rows = read_glue("sst2", GLUE, split)[:limit]
        enc = tokenizer([e.text_a for e in rows], truncation=True, max_length=r["max_length"])
        return [{"input_ids": enc["input_ids"][i], "token_type_ids": enc["token_type_ids"][i],
                 "attention_mask": enc["attention_mask"][i], "labels": e.label} for i, e in enumerate(rows)]

    train, dev = dataset("train", examples), dataset("dev", eval_examples)
    transformers.set_seed(r["seed"])
    model = BertForSequenceClassification.from_pretrained(MODEL, num_labels=2, attn_implementation="sdpa")
    args = TrainingArguments(output_dir=out, learning_rate=r["lr"], per_device_train_batch_size=r["batch_size"],
                             per_device_eval_batch_size=2 * r["batch_size"], num_train_epochs=r["epochs"],
                             seed=r["seed"], warmup_steps=r["warmup"], weight_decay=r["weight_decay"],
                             adam_epsilon=r["adam_eps"], max_grad_norm=1.0, eval_strategy="no", save_strategy="no",
                             logging_strategy="no", report_to="none", use_cpu=True, disable_tqdm=True,
                             dataloader_pin_memory=False)
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer))
    train_s = trainer.train().metrics["train_runtime"]
    pred = trainer.predict(dev)
    accuracy = float(np.mean(pred.predictions.argmax(-1) == np.array([d["labels"] for d in dev])))
    return dict(train_s=train_s, total_s=time.perf_counter() - start, examples=len(train), accuracy=accuracy)


def child(impl: str, examples: int | None, eval_examples: int | None):
    common.setup()
    import transformers  # noqa: F401  (both children import both libraries: the same baseline)

    import bertforge.finetuning.finetune  # noqa: F401
    baseline = common.rss_mb()
    with tempfile.TemporaryDirectory() as out:
        r = (run_bertforge if impl == "bertforge" else run_transformers)(examples, eval_examples, out)
    print(" ".join(f"{k}={v}" for k, v in r.items()) + " " + common.child_memory_line(baseline))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="512 training examples, one run each")
    p.add_argument("--examples", type=int, default=None, help="training examples (default 4096; 0 = all)")
    p.add_argument("--eval-examples", type=int, default=None, help="dev examples scored at the end (default all)")
    p.add_argument("--reps", type=int, default=1, help="runs per implementation, alternating (median reported)")
    p.add_argument("--child", metavar="IMPL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    examples = args.examples if args.examples is not None else (512 if args.quick else 4096)
    examples = examples or None  # 0: the whole training set
    if args.child:
        return child(args.child, examples, args.eval_examples)

    common.setup()
    if not MODEL.is_dir() or not (GLUE / "SST-2" / "train.tsv").is_file():
        print(f"skipped: {MODEL} or {GLUE / 'SST-2'} is absent (set BERTFORGE_SHARED to the shared folder)")
        print("ratio=nan")
        return 0
    print(f"machine: {common.machine()}")
    print(f"SST-2, {examples or 'all'} training examples, 1 epoch, batch 32, lr 2e-5, max length 128, seed 42; "
          f"{args.reps} run(s) each, alternating, one process per run")
    flags = ["--examples", str(examples or 0)] + (["--eval-examples", str(args.eval_examples)]
                                                  if args.eval_examples else [])
    runs = {"bertforge": [], "transformers": []}
    for _ in range(args.reps):
        for impl in runs:
            r = common.run_child("benchmarks.bench_finetune", ["--child", impl, *flags], timeout=3 * 3600)
            runs[impl].append(r)
            print(f"  {impl:12} train {r['train_s']:7.1f} s  total {r['total_s']:7.1f} s  "
                  f"dev accuracy {r['accuracy']:.4f}  peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    print(f"{'impl':12} {'train_s':>8} {'examples/s':>10} {'total_s':>8} {'dev_acc':>8} {'peak_MB':>8}")
    rate = {}
    for impl, rs in runs.items():
        train_s = common.median([r["train_s"] for r in rs])
        rate[impl] = rs[0]["examples"] / train_s
        print(f"{impl:12} {train_s:8.1f} {rate[impl]:10.1f} {common.median([r['total_s'] for r in rs]):8.1f} "
              f"{common.median([r['accuracy'] for r in rs]):8.4f} {max(r['peak_rss_mb'] for r in rs):8.0f}")
    print(f"ratio={rate['bertforge'] / rate['transformers']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
