"""Scoring a model on a task's data: the evaluation fine-tuning runs every epoch, and the `evaluate` command."""

import json
import statistics
import time
from pathlib import Path

from ..core.errors import BertforgeError
from ..inference.batches import run_model
from ..core.io import check_output, write_json
from ..core.flags import add_device_argument, count
from ..tasks import TASKS, add_family_arguments, make_family
from ..tasks.base import Split, TaskFamily
from ..inference.batches import padding
from ..text.tokenizer import BertTokenizer


def predict_split(family: TaskFamily, model, split: Split, batch_size: int, pad_id: int, bf16: bool = False,
                  progress: str | None = None) -> dict:
    """The model's outputs for every row of the split, as the family reads them."""
    return run_model(model, split.encoded, padding(family.inputs, pad_id), family.output_keys,
                     family.per_token_outputs, batch_size, bf16=bf16, progress=progress)


def evaluate_splits(family: TaskFamily, model, splits: list[Split], batch_size: int, pad_id: int, bf16=False,
                    progress=False, out: Path | None = None) -> dict:
    """The metrics of every split; with `out`, each split's predictions are written there (the family's file)."""
    metrics = {}
    for split in splits:
        outputs = predict_split(family, model, split, batch_size, pad_id, bf16,
                                f"evaluate {split.name}" if progress else None)
        metrics.update(family.score(split, outputs))
        if out is not None:
            family.write(split, outputs, out)
    return metrics


def inference_rate(family: TaskFamily, model, split: Split, batch_size: int, pad_id: int, bf16: bool = False,
                   repeats: int = 3) -> float:
    """Examples per second of the model on the split (the median of `repeats` timed passes after one untimed)."""
    times = []
    for i in range(repeats + 1):
        began = time.perf_counter()
        predict_split(family, model, split, batch_size, pad_id, bf16)
        times.append(time.perf_counter() - began)
    return len(split.examples) / statistics.median(times[1:])


def check_model(family: TaskFamily, model, folder, fine_tuned: bool) -> None:
    """The checkpoint fits the task: its head is the task's (and trained, for `fine_tuned`), its positions hold
    the task's inputs."""
    config = model.config
    check_length(family, config, folder)
    saved_as = config.extra.get("architectures") or []
    wanted = family.model_class.architecture()
    if fine_tuned and saved_as and wanted not in saved_as:
        raise BertforgeError(f"{folder}: a {saved_as[0]} model, but {family.task} needs a {wanted}")
    if fine_tuned and model.fresh_parts:
        raise BertforgeError(f"{folder}: has no trained {', '.join(model.fresh_parts)} for {family.task}; "
                             f"fine-tune it first (bertforge finetune {family.task} --model {folder} ...)")


def check_length(family: TaskFamily, config, folder) -> None:
    if family.max_length > config.max_position_embeddings:
        raise BertforgeError(f"--max-length {family.max_length}: the model in {folder} has "
                             f"{config.max_position_embeddings} positions")


def load_finetuned(args, reading: bool = True):
    """The family, tokenizer and model of a fine-tuned folder; label names are the model's where they fit."""
    family = make_family(args.task, args.data, args.max_length, vars(args), reading)
    tokenizer = BertTokenizer.from_pretrained(args.model)
    from ..inference.runtime import linear_weights_in_bf16, pick_device, warn_if_emulated_bf16  # torch: not at the top

    device = pick_device(args.device)
    model = family.model_class.from_pretrained(args.model).to(device)
    check_model(family, model, args.model, fine_tuned=True)
    if args.bf16:
        warn_if_emulated_bf16(device)
        linear_weights_in_bf16(model)
    family.use_model_labels(model.config)
    return family, tokenizer, model


def add_model_run_arguments(p, data_help: str, examples_help: str):
    """What `evaluate` and `predict` share: the task, the fine-tuned model, the data and how to run it."""
    p.add_argument("task", help=f"one of {', '.join(TASKS)}")
    p.add_argument("--model", required=True, help="a fine-tuned folder (e.g. RUN/best)")
    p.add_argument("--data", help=data_help)
    p.add_argument("--max-length", type=count(3), help="tokens per input (default: the task's, 128 to 384)")
    p.add_argument("--max-eval-examples", type=count(1), help=examples_help)
    p.add_argument("--batch-size", type=count(1), default=64, help="rows per forward pass")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (about 2x fp32 on CPUs with AVX512-BF16 "
                   "or AMX)")
    add_device_argument(p)
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_family_arguments(p)


def add_evaluate_arguments(p):
    add_model_run_arguments(p, "the task's data folder (or file); your own data: --dev FILE or --dataset instead",
                            "score only the first N examples")
    p.add_argument("--split", help="split to score (default: the task's dev splits)")
    p.add_argument("--out", help="folder for eval_results.json and each scored split's predictions (the task's "
                                 "prediction file, as predict writes it); default: the metrics on stdout only")


def run_evaluate(args) -> int:
    inputs = [p for p in (args.model, args.data) if p]
    out = None if args.out is None else check_output(args.out, "--out", inputs=inputs)
    family, tokenizer, model = load_finetuned(args)
    splits = [family.read(s, tokenizer, args.max_eval_examples) for s in ([args.split] if args.split
                                                                          else family.eval_splits)]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    metrics = evaluate_splits(family, model, splits, args.batch_size, tokenizer.pad_token_id, args.bf16,
                              progress=args.progress, out=out)
    if out is not None:
        write_json(out / "eval_results.json", {"task": args.task, "model": str(args.model),
                                               "splits": [s.name for s in splits], **metrics})
    print(json.dumps(metrics, indent=2))
    return 0
