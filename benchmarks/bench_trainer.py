"""The tutorial's path against `bertforge finetune`: one small own-data CSV, one model, the same epochs, batch size
and learning rate.

- trainer: docs/transformers.md's script, as a transformers user runs it: bertforge's AutoTokenizer and
  AutoModelForSequenceClassification, a `datasets.Dataset` read from the CSV and tokenized with `map`,
  transformers' `Trainer` (DataCollatorWithPadding, its defaults: lr 5e-5, no warm-up or weight decay, linear
  decay), `evaluate()` on the dev CSV, `save_model` and `model.save_pretrained`.
- finetune: `bertforge finetune text-classification --train train.csv --dev dev.csv` with the same --epochs,
  --batch-size and --lr, --warmup 0 --weight-decay 0 (length-grouped batches, the model's real tokens packed,
  one evaluation at the epoch's end, best/ and final/ saved).

The CSVs are the first --train-rows rows of SST-2's train.tsv and --dev-rows of its dev.tsv. Each run is its own
process; runs alternate trainer, finetune, trainer, ... (--reps each) and the figures are medians. `job_s` is the
whole job after the imports: model and tokenizer read, data read and tokenized, training, evaluation, saving.

    python3 -m benchmarks.bench_trainer                  # 1,000 rows, 1 epoch, batch 16, 3 runs each
    python3 -m benchmarks.bench_trainer --model FOLDER   # another model folder

The last line is `ratio=<trainer job_s / finetune job_s>`.
"""

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

MODEL = common.SHARED / "models" / "all-MiniLM-L6-v2"
SST2 = common.SHARED / "data" / "glue" / "SST-2"


def write_csvs(folder: Path, train_rows: int, dev_rows: int) -> None:
    """train.csv and dev.csv (text,label) from the first rows of SST-2's train and dev files."""
    for split, count in (("train", train_rows), ("dev", dev_rows)):
        lines = (SST2 / f"{split}.tsv").read_text(encoding="utf-8").splitlines()[1:count + 1]
        with open(folder / f"{split}.csv", "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["text", "label"])
            writer.writerows(line.split("\t") for line in lines)


def run_trainer(model: str, data: Path, out: Path, epochs: int, batch_size: int, lr: float) -> dict:
    from datasets import Dataset
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    from bertforge import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    network = AutoModelForSequenceClassification.from_pretrained(model, num_labels=2)
    train, dev = (Dataset.from_csv(str(data / f"{split}.csv")).map(
        lambda batch: tokenizer(batch["text"], truncation=True), batched=True) for split in ("train", "dev"))
    args = TrainingArguments(output_dir=str(out), num_train_epochs=epochs, per_device_train_batch_size=batch_size,
                             learning_rate=lr, use_cpu=True, report_to=[], save_strategy="no", disable_tqdm=True,
                             dataloader_pin_memory=False)
    trainer = Trainer(model=network, args=args, train_dataset=train, eval_dataset=dev, processing_class=tokenizer,
                      data_collator=DataCollatorWithPadding(tokenizer),
                      compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1) == p.label_ids).mean())})
    trainer.train()
    accuracy = trainer.evaluate()["eval_accuracy"]
    trainer.save_model(str(out / "model"))
    network.save_pretrained(out / "model")
    return {"accuracy": accuracy}


def run_finetune(model: str, data: Path, out: Path, epochs: int, batch_size: int, lr: float) -> dict:
    from bertforge.cli import main

    assert main(["finetune", "text-classification", "--model", model, "--train", str(data / "train.csv"), "--dev",
                 str(data / "dev.csv"), "--epochs", str(epochs), "--batch-size", str(batch_size), "--lr", str(lr),
                 "--warmup", "0", "--weight-decay", "0", "--out", str(out / "run"), "--no-progress"]) == 0
    return {"accuracy": json.loads((out / "run" / "eval_results.json").read_text())["accuracy"]}


def child(path: str, model: str, data: Path, epochs: int, batch_size: int, lr: float) -> None:
    common.setup()
    import datasets  # noqa: F401  (both children import both libraries: the same baseline)
    import transformers  # noqa: F401

    import bertforge.cli  # noqa: F401
    import bertforge.model.auto  # noqa: F401
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        r = (run_trainer if path == "trainer" else run_finetune)(model, data, Path(out), epochs, batch_size, lr)
        job_s = time.perf_counter() - start
    print(f"job_s={job_s} " + " ".join(f"{k}={v}" for k, v in r.items()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=str(MODEL), help="model folder (default: the shared all-MiniLM-L6-v2)")
    p.add_argument("--train-rows", type=int, default=1000)
    p.add_argument("--dev-rows", type=int, default=200)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=5e-5)
    p.add_argument("--reps", type=int, default=3, help="runs of each path, alternating (medians reported)")
    p.add_argument("--child", metavar="PATH", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(args.child, args.model, args.data, args.epochs, args.batch_size, args.lr)

    common.setup()
    if not Path(args.model).is_dir() or not (SST2 / "train.tsv").is_file():
        print(f"skipped: {args.model} or {SST2} is absent (set BERTFORGE_SHARED to the shared folder)")
        print("ratio=nan")
        return 0
    print(f"machine: {common.machine()}")
    print(f"{Path(args.model).name}, {args.train_rows} SST-2 rows (own-data CSV), {args.dev_rows} dev rows, "
          f"{args.epochs} epochs, batch {args.batch_size}, lr {args.lr}; {args.reps} runs each, alternating, one "
          "process per run")
    runs = {"trainer": [], "finetune": []}
    with tempfile.TemporaryDirectory() as data:
        write_csvs(Path(data), args.train_rows, args.dev_rows)
        flags = ["--model", args.model, "--data", data, "--epochs", str(args.epochs), "--batch-size",
                 str(args.batch_size), "--lr", str(args.lr)]
        for _ in range(args.reps):
            for path in runs:
                r = common.run_child("benchmarks.bench_trainer", ["--child", path, *flags], timeout=3600)
                runs[path].append(r)
                print(f"  {path:9} job {r['job_s']:6.1f} s  dev accuracy {r['accuracy']:.4f}", flush=True)
    print(f"{'path':9} {'job_s':>7} {'rows/s':>7} {'dev_acc':>8}")
    job = {}
    for path, rs in runs.items():
        job[path] = common.median([r["job_s"] for r in rs])
        print(f"{path:9} {job[path]:7.1f} {args.epochs * args.train_rows / job[path]:7.1f} "
              f"{common.median([r['accuracy'] for r in rs]):8.4f}")
    print(f"ratio={job['trainer'] / job['finetune']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
