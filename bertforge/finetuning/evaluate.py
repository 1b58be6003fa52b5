"""Scoring a model on a task's data: the evaluation fine-tuning runs every epoch, and the `evaluate` command."""

import json
import sys
import time
from pathlib import Path

from ..core.errors import BertforgeError
from ..model.architectures.registry import head_of, heads_of
from ..inference.batches import padding, row_lengths, run_model
from ..core.io import check_output, write_json
from ..core.flags import add_device_argument, add_revision_argument, count
from ..core.hub import model_folder
from ..tasks import TASKS, add_family_arguments, make_family
from ..tasks.base import Split, TaskFamily
from ..text.tokenizer import BertTokenizer


def predict_split(family: TaskFamily, model, split: Split, batch_size: int, pad_id: int, bf16: bool = False,
                  progress: str | None = None) -> dict:
    """The model's outputs for every row of the split, as the family reads them."""
    return run_model(model, split.encoded, padding(family.inputs, pad_id), family.output_keys,
                     family.per_token_outputs, batch_size, bf16=bf16, progress=progress)


class Speed:
    """Examples per second of a model's forward passes, the one definition behind evaluate's speed line, suite's
    table and benchmarks/bench_distill.py: the splits' examples over the seconds `predict_split` took on their
    encoded rows (batches padded, the forward passes, the outputs back on the CPU; reading, tokenizing and scoring
    are not timed)."""

    def __init__(self):
        self.examples, self.seconds = 0, 0.0

    def predict(self, family: TaskFamily, model, split: Split, batch_size: int, pad_id: int, bf16: bool = False,
                progress: str | None = None) -> dict:
        """predict_split, timed, after one untimed batch of the split's longest rows: without it the first pass's
        one-time costs made a lone pass of BERT-Tiny over SST-2 dev take a third longer than the next."""
        longest = row_lengths(split.encoded).argsort(kind="stable")[-batch_size:].tolist()
        warm = {k: [split.encoded[k][i] for i in longest] for k in family.inputs if k in split.encoded}
        run_model(model, warm, padding(family.inputs, pad_id), family.output_keys, family.per_token_outputs,
                  batch_size, bf16=bf16)
        began = time.perf_counter()
        outputs = predict_split(family, model, split, batch_size, pad_id, bf16, progress)
        self.seconds += time.perf_counter() - began
        self.examples += len(split.examples)
        return outputs

    @property
    def examples_per_s(self) -> float:
        return self.examples / self.seconds if self.seconds else 0.0


def evaluate_splits(family: TaskFamily, model, splits: list[Split], batch_size: int, pad_id: int, bf16=False,
                    progress=False, out: Path | None = None, speed: Speed | None = None) -> dict:
    """The metrics of every split; with `out`, each split's predictions are written there (the family's file); with
    `speed`, the predictions are timed into it."""
    metrics = {}
    for split in splits:
        label = f"evaluate {split.name}" if progress else None
        outputs = (predict_split if speed is None else speed.predict)(family, model, split, batch_size, pad_id, bf16,
                                                                      label)
        metrics.update(family.score(split, outputs))
        if out is not None:
            family.write(split, outputs, out)
    return metrics


def weights_bytes(folder) -> int:
    """The size on disk of the files a model folder's weights are read from (a Google checkpoint's: its own)."""
    from ..model.formats import google_checkpoint  # torch: not at the top
    from ..model.formats.checkpoint import weight_files

    google = google_checkpoint.find(folder)
    files = google_checkpoint.header(google)[2] if google is not None else weight_files(Path(folder))
    return sum(f.stat().st_size for f in files)


# The keys of model_figures' record
SPEED_FIGURES = ("examples_per_s", "batch_size", "device", "threads", "bf16", "parameters", "bytes_on_disk")


def model_figures(model, folder, examples_per_s: float, batch_size: int, bf16: bool = False) -> dict:
    """What a speed line says: the examples/s and how they were run (batch, device, its threads on a CPU, bf16),
    the model's parameters and its weights' size on disk."""
    import torch

    device = next(model.parameters()).device
    return {"examples_per_s": round(examples_per_s, 1), "batch_size": batch_size, "device": str(device),
            "threads": torch.get_num_threads() if device.type == "cpu" else None, "bf16": bf16,
            "parameters": sum(p.numel() for p in model.parameters()), "bytes_on_disk": weights_bytes(folder)}


def run_conditions(figures: dict) -> str:
    """How the examples/s were measured, e.g. 'batch 64, cpu, 2 threads'."""
    threads = figures.get("threads")
    return ", ".join([f"batch {figures['batch_size']}", figures["device"]]
                     + ([f"{threads} thread{'s' if threads != 1 else ''}"] if threads else [])
                     + (["bf16"] if figures.get("bf16") else []))


def whole(x: float) -> str:
    return f"{x:,.0f}"


def millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"


def mebibytes(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def speed_line(figures: dict) -> str:
    """E.g. 'speed: 3,749 examples/s (batch 64, cpu, 2 threads) · 4.4M parameters · 16.7 MiB on disk'."""
    return (f"speed: {whole(figures['examples_per_s'])} examples/s ({run_conditions(figures)}) · "
            f"{millions(figures['parameters'])} parameters · {mebibytes(figures['bytes_on_disk'])} on disk")


def check_model(family: TaskFamily, model, folder, fine_tuned: bool) -> None:
    """The checkpoint fits the task: its head is the task's (and trained, for `fine_tuned`), its positions hold
    the task's inputs."""
    config = model.config
    check_length(family, config, folder)
    saved_as = config.extra.get("architectures") or []
    wanted = family.model_class.architecture()
    if fine_tuned and saved_as and head_of(wanted) not in heads_of(config):
        raise BertforgeError(f"{folder}: a {saved_as[0]} model, but {family.task} needs a {wanted}")
    if fine_tuned and model.fresh_parts:
        raise BertforgeError(f"{folder}: has no trained {', '.join(model.fresh_parts)} for {family.task}; "
                             f"fine-tune it first (bertforge finetune {family.task} --model {folder} ...)")


def check_length(family: TaskFamily, config, folder) -> None:
    if family.max_length > config.max_tokens:
        raise BertforgeError(f"--max-length {family.max_length}: the model in {folder} has "
                             f"{config.max_tokens} positions")


def load_finetuned(args, reading: bool = True):
    """The family, tokenizer and model of a fine-tuned folder (--model, or a Hub name at --revision), and that
    folder; label names are the model's where they fit."""
    family = make_family(args.task, args.data, args.max_length, vars(args), reading)
    folder = model_folder(args.model, args.revision)
    tokenizer = BertTokenizer.from_pretrained(folder)
    from ..inference.runtime import linear_weights_in_bf16, pick_device, warn_if_emulated_bf16  # torch: not at the top

    device = pick_device(args.device)
    model = family.model_class.from_pretrained(folder).to(device)
    check_model(family, model, args.model, fine_tuned=True)
    if args.bf16:
        warn_if_emulated_bf16(device)
        linear_weights_in_bf16(model)
    family.use_model_labels(model.config)
    return family, tokenizer, model, folder


def add_model_run_arguments(p, data_help: str, examples_help: str):
    """What `evaluate` and `predict` share: the task, the fine-tuned model, the data and how to run it."""
    p.add_argument("task", help=f"one of {', '.join(TASKS)}")
    p.add_argument("--model", required=True, help="a fine-tuned folder (e.g. RUN/best), or a Hub model's name "
                   "(org/name)")
    add_revision_argument(p)
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
    p.description = (f"{p.description}: the metrics as JSON on stdout, then a speed line on stderr (also "
                     "eval_results.json's \"speed\"): the examples/s of the model's forward passes over the encoded "
                     "examples (batches of --batch-size padded, run and read back, after one untimed batch of the "
                     "longest; reading, tokenizing and scoring not timed) on --device with its threads, the "
                     "model's parameters and its weights files' size on disk")
    add_model_run_arguments(p, "the task's data folder (or file); your own data: --dev FILE or --dataset instead",
                            "score only the first N examples")
    p.add_argument("--split", help="split to score (default: the task's dev splits)")
    p.add_argument("--out", help="folder for eval_results.json and each scored split's predictions (the task's "
                                 "prediction file, as predict writes it); default: the metrics on stdout only")


def run_evaluate(args) -> int:
    inputs = [p for p in (args.model, args.data) if p]
    out = None if args.out is None else check_output(args.out, "--out", inputs=inputs)
    family, tokenizer, model, folder = load_finetuned(args)
    splits = [family.read(s, tokenizer, args.max_eval_examples) for s in ([args.split] if args.split
                                                                          else family.eval_splits)]
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    speed = Speed()
    metrics = evaluate_splits(family, model, splits, args.batch_size, tokenizer.pad_token_id, args.bf16,
                              progress=args.progress, out=out, speed=speed)
    figures = model_figures(model, folder, speed.examples_per_s, args.batch_size, args.bf16)
    if out is not None:
        write_json(out / "eval_results.json", {"task": args.task, "model": str(args.model),
                                               "splits": [s.name for s in splits], **metrics, "speed": figures})
    print(json.dumps(metrics, indent=2))
    print(speed_line(figures), file=sys.stderr)
    return 0
