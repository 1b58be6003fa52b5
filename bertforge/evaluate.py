"""Scoring a model on a task's data: the evaluation fine-tuning runs every epoch, and the `evaluate` command."""

import json

from .inference import run_model
from .options import count
from .tasks import TASKS, add_family_arguments, make_family
from .tasks.base import Split, TaskFamily, padding
from .tokenizer import BertTokenizer


def predict_split(family: TaskFamily, model, split: Split, batch_size: int, pad_id: int, bf16: bool = False,
                  progress: str | None = None) -> dict:
    """The model's outputs for every row of the split, as the family reads them."""
    return run_model(model, split.encoded, padding(family.inputs, pad_id), family.output_keys,
                     family.per_token_outputs, batch_size, bf16=bf16, progress=progress)


def evaluate_splits(family: TaskFamily, model, splits: list[Split], batch_size: int, pad_id: int, bf16=False,
                    progress=False) -> dict:
    metrics = {}
    for split in splits:
        outputs = predict_split(family, model, split, batch_size, pad_id, bf16,
                                f"evaluate {split.name}" if progress else None)
        metrics.update(family.score(split, outputs))
    return metrics


def load_finetuned(args, reading: bool = True):
    """The family, tokenizer and model of a fine-tuned folder; label names are the model's where they fit."""
    family = make_family(args.task, args.data, args.max_length, vars(args), reading)
    tokenizer = BertTokenizer.from_pretrained(args.model)
    model = family.model_class.from_pretrained(args.model)
    family.use_model_labels(model.config)
    return family, tokenizer, model


def add_evaluate_arguments(p):
    p.add_argument("task", help=f"one of {', '.join(TASKS)}")
    p.add_argument("--model", required=True, help="a fine-tuned folder (e.g. RUN/best)")
    p.add_argument("--data", help="the task's data folder (or file); your own data: --dev FILE instead")
    p.add_argument("--split", help="split to score (default: the task's dev splits)")
    p.add_argument("--max-length", type=count(3), help="tokens per input (default: the task's, 128 or 384)")
    p.add_argument("--max-eval-examples", type=count(1), help="score only the first N examples")
    p.add_argument("--batch-size", type=count(1), default=64, help="rows per forward pass (default 64)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    add_family_arguments(p)


def run_evaluate(args) -> int:
    family, tokenizer, model = load_finetuned(args)
    splits = [family.read(s, tokenizer, args.max_eval_examples) for s in ([args.split] if args.split
                                                                          else family.eval_splits)]
    metrics = evaluate_splits(family, model, splits, args.batch_size, tokenizer.pad_token_id, args.bf16,
                              progress=True)
    print(json.dumps(metrics, indent=2))
    return 0
