"""`--resume` continues a run as it began, and its args.json keeps every part of it.

A run's args.json is written when the run starts. Resuming, the run's settings are checked against it before
anything is written: a change to what the run is (its data, model, task or objective: a job's `resume_fixed`)
or to what its checkpoint holds (`TRAINING_FIXED`: the data order follows the batch size and the seed, the
optimizer's state carries its rate, weight decay and epsilon) is a one-line error naming the flag, the run's
value and the new one. The other settings may change (`--steps` or `--epochs` to extend, `--time-budget`,
`--save-every`, `--eval-every`, `--log-every`, `--keep`, `--patience`, `--warmup`, `--schedule`, `--grad-accum`,
`--max-grad-norm`, `--bf16`, `--no-progress`, `--report-to`, `--device`, `--max-train-examples`, ...).
args.json is then not rewritten: the first part's record stays as it was (`--args-file` reruns it), and each
resumption is appended to its "resumed" list: when, from which step, the wall seconds the run had taken by
that checkpoint (all its parts), the command, and the settings that changed.
"""

import dataclasses
import json
import time
from pathlib import Path

from ..core.version import __version__
from ..core.errors import BertforgeError
from ..core.io import read_json, write_text_atomic

ARGS_FILE = "args.json"

# TrainArgs fields a resumed run keeps (the flag each is given by)
TRAINING_FIXED = {"batch_size": "--batch-size", "seed": "--seed", "lr": "--lr", "weight_decay": "--weight-decay",
                  "adam_eps": "--adam-eps", "bias_correction": "--google-adam (no bias correction)"}
# What a pre-training run is: keys of its args.json's "extra" (the objective and the row length as the data
# resolved them, the config as used: --init-from's when given)
PRETRAIN_FIXED = {"data": "--data", "max_length": "--data (its rows' length)", "recipe": "--recipe",
                  "objective": "--objective", "init_from": "--init-from", "config": "--config", "teacher": "--teacher"}
# What a fine-tuning (or task distillation) run is: the task, the model, the data, the length
FINETUNE_FIXED = {"task": "the task", "model": "--model", "teacher": "--teacher", "data": "--data",
                  **{f"family_options.{k}": f"--{k}" for k in ("train", "dev", "test", "dataset")},
                  "max_length": "--max-length"}
# What a task distillation run is besides: the student (its shape), the rows it learns from, and the
# representation terms, whose width map its checkpoint holds; the loss weights (--temperature, --alpha,
# --representation-weight) may change as the rate's schedule may
DISTILL_FIXED = {**FINETUNE_FIXED, "model": "--student", "prune": "--prune", "prune_from": "--prune-from",
                 "augment": "--augment", "unlabelled": "--unlabelled", "representations": "--representations"}
# What a sentence-embedding distillation run is: the teacher, the student, the texts and their held-out share (which
# texts it trains on), their length
EMBEDDINGS_FIXED = {"teacher": "--teacher", "model": "--student", "prune": "--prune", "input": "--input",
                    "held_out": "--held-out", "max_length": "--max-length"}
FOLLOWS = {"config": "init_from"}  # with --init-from, the model's config is the checkpoint's whatever --config says
# how, not what: and whether the teacher's outputs were read from the cache (a resumed part reads what the first
# part wrote)
NOT_SETTINGS = ("resume", "overwrite", "extra.arguments", "extra.command", "resumed", "extra.teacher_outputs_cached")


def run_record(args, device: str | None) -> dict:
    """What args.json records of a run: its TrainArgs, the device the loop used, bertforge's version."""
    record = {**dataclasses.asdict(args), "device": device, "bertforge": __version__}
    return json.loads(json.dumps(record, default=str))  # as read back from the file


def value(record: dict, key: str):
    """`key` of a record: a TrainArgs field, or a dotted path into its "extra" (missing: None)."""
    here = record if key in TRAINING_FIXED else record.get("extra", {})
    for part in key.split("."):
        here = here.get(part) if isinstance(here, dict) else None
    return here


def same(old, new) -> bool:
    """Equal values; two paths are the same when they name one file, however they are spelled."""
    if old == new:
        return True
    if isinstance(old, str) and isinstance(new, str) and old and new:
        return Path(old).expanduser().resolve() == Path(new).expanduser().resolve()
    return False


def check_resume(args, fixed: dict[str, str]) -> dict | None:
    """With --resume, the run's args.json (None if it has none) once the settings in `fixed` (a job's, keys
    of "extra") and `TRAINING_FIXED` are found unchanged; a change is a BertforgeError naming the flag."""
    path = Path(args.out) / ARGS_FILE
    if not args.resume or not path.is_file():
        return None
    previous, new = read_json(path), run_record(args, None)
    for key, flag in {**fixed, **TRAINING_FIXED}.items():
        follows = FOLLOWS.get(key)
        if follows and value(previous, follows) is not None and value(new, follows) is not None:
            continue
        old_value, new_value = value(previous, key), value(new, key)
        if not same(old_value, new_value):
            raise BertforgeError(f"--resume: {flag} {shown(new_value)}, but the run in {args.out} was started with "
                                 f"{shown(old_value)} ({path}): a resumed run goes on as it began; start another "
                                 "run (another --out) for other settings")
    return previous


def shown(v) -> str:
    return "none" if v is None else json.dumps(v) if not isinstance(v, str) else v


def write_record(args, device: str, step: int, previous: dict | None, earlier_s: float | None) -> None:
    """RUN/args.json: the run's record when it starts; resumed, the first part's record with this resumption
    added to its "resumed" list (`earlier_s`: the wall seconds of the run by the checkpoint it resumes from)."""
    record = run_record(args, device)
    if args.resume:
        base = previous if previous is not None else record
        changed = {key: v for key, v in flat(record).items() if key not in NOT_SETTINGS and v != flat(base).get(key)}
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "step": step,
                 "wall_s_before": None if earlier_s is None else round(earlier_s, 1),
                 "command": record["extra"].get("command"), "changed": changed}
        record = {**base, "resumed": [*base.get("resumed", []), entry]}
    write_text_atomic(Path(args.out) / ARGS_FILE, json.dumps(record, indent=2) + "\n")


def run_wall_seconds(out, started: float) -> float:
    """The wall seconds of the run in `out`, all its parts together: this part's since `started`
    (time.perf_counter()) and, resumed, what args.json records the parts before it took (not recorded: none)."""
    resumed = read_json(Path(out) / ARGS_FILE).get("resumed") or [{}]
    return round(time.perf_counter() - started + (resumed[-1].get("wall_s_before") or 0.0), 1)


def flat(record: dict) -> dict:
    """A record's settings by key: TrainArgs fields by name, "extra" ones as extra.NAME."""
    out = {k: v for k, v in record.items() if k != "extra"}
    return out | {f"extra.{k}": v for k, v in record.get("extra", {}).items()}
