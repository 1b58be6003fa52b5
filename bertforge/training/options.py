"""The training options, declared once as `TrainArgs` fields (the loop's `train.TrainArgs`) and turned into flags
for `pretrain`/`finetune`, with `--args-file`, which reruns a run from the command line its args.json records.
Their value types are `core.flags`'.
"""

import argparse
import dataclasses
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.flags import DEVICE_HELP, count, duration, fraction_or_steps, non_negative, positive, torch_device
from ..core.io import read_json

TENSORBOARD_MISSING = "needs the tensorboard package: pip install -e '.[tensorboard]'"
# Steps in a row whose loss or gradient is not finite that stop a run (each such step is skipped, the weights left
# as they were): a rare bad batch is survived, a broken model (NaN weights, a bad config) or rate never recovers.
NONFINITE_STEPS = 10


def reporter(text: str) -> str:
    """Where the training figures go besides metrics.jsonl: none, or tensorboard (whose package is an extra)."""
    if text not in ("none", "tensorboard"):
        raise argparse.ArgumentTypeError(f"expected none or tensorboard, not {text!r}")
    if text == "tensorboard" and importlib.util.find_spec("tensorboard") is None:
        raise argparse.ArgumentTypeError(f"tensorboard {TENSORBOARD_MISSING}")
    return text


def option(default, help: str | None = None, **flag):
    """A TrainArgs field; with `help` it is also a command-line flag (see options.add_training_arguments)."""
    return field(default=default, metadata={"help": help, **flag} if help else {})


@dataclass
class TrainArgs:
    """The training options: the one definition that `pretrain`, `finetune`, the demo and their flags share.
    A command's own defaults (the paper's pre-training and fine-tuning recipes differ) are passed beside it."""

    out: Path
    steps: int = option(1000, "optimizer steps", type=count(1))
    batch_size: int = option(32, "global batch, all processes and accumulation steps together", type=count(1))
    lr: float = option(1e-4, "peak learning rate", type=positive)
    warmup: float = option(0.1, "warm-up: a fraction of the steps or of the time budget (<1), or a number of steps",
                           type=fraction_or_steps)
    schedule: str = option("linear", "linear: warm-up from 0, then linear decay to 0; one-cycle: cosine warm-up "
                           "from lr/25, then cosine decay to 0", choices=("linear", "one-cycle"))
    time_budget: float = option(0.0, "train for this much time (90s, 45m, 4h): the schedule follows training time "
                                "and reaches 0 when it is spent; --resume counts the time already spent; "
                                "evaluation and checkpoints are not counted; --steps still caps the run "
                                "(0: --steps decide)", type=duration)
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)")
    adam_eps: float = option(1e-6, "Adam epsilon", type=positive)
    bias_correction: bool = option(True, "Adam without bias correction, as Google's code", flag="--google-adam",
                                   inverse=True)
    max_grad_norm: float = option(1.0, "clip the gradient norm to this (0: no clipping)")
    grad_accum: int = option(1, "split each process's share of a batch into this many passes", type=count(1))
    bf16: bool = option(False, "bfloat16 autocast (AMX on recent CPUs, tensor cores on GPUs)")
    seed: int = option(0, "random seed (data order, dropout, new weights)")
    log_every: int = option(1, "write a metrics.jsonl row every N steps", type=count(1))
    eval_every: int = option(0, "evaluate on held-out data every N steps (0: never)")
    save_every: int = option(0, "write a resumable checkpoint every N steps (0: only when Ctrl-C or SIGTERM stops "
                             "the run, and at its end)")
    keep: int = option(2, "step checkpoints kept on disk (final/ and best/ are extra)", type=count(1))
    # pretrain keeps them (it has no flag); finetune removes them unless --keep-checkpoints
    keep_checkpoints: bool = option(True, "keep the step checkpoints (model and optimizer state, for --resume) when "
                                    "the run completes; without it only best/ and final/ stay")
    patience: int = option(0, "stop early after this many evaluations without a better best metric (0: never)")
    resume: bool = option(False, "continue from the run's latest checkpoint, as the run began: a change to its "
                          "data, model (--config, --init-from, --model), task, --objective or --recipe, --teacher, "
                          "length, --batch-size, --seed, --lr, --weight-decay, --adam-eps or --google-adam is "
                          "refused (checked against RUN/args.json); --steps or --epochs (to extend), --time-budget, "
                          "--save-every, --eval-every, --log-every, --keep, --device, --no-progress and the other "
                          "settings may change, and args.json adds each resumption to its history")
    overwrite: bool = option(False, "start over in a run folder that holds an earlier run (its checkpoints go)")
    progress: bool = option(True, "no progress bar", flag="--no-progress", inverse=True)
    report_to: str = option("none", "also log the metrics.jsonl figures as TensorBoard event files in the run "
                            "folder: none or tensorboard (an extra: pip install -e '.[tensorboard]')", type=reporter)
    device: str | None = option(None, DEVICE_HELP, type=torch_device)
    extra: dict = field(default_factory=dict)  # recorded in the run's args.json, not used by the loop

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup * self.steps) if self.warmup < 1 else int(self.warmup)


TYPES = {int: count(0), float: non_negative}  # the checks of fields that name no type of their own


def add_training_arguments(parser, defaults: dict, skip=(), notes: dict | None = None, args_file: bool = True) -> None:
    """Flags for the `TrainArgs` fields (but those in `skip`), with this command's defaults; `notes` end the help
    of some (a default of None there means: decided elsewhere, e.g. by a recipe, as the note says); `args_file`:
    --args-file, for the commands whose runs record their arguments."""
    group, notes = parser.add_argument_group("training"), notes or {}
    for f in dataclasses.fields(TrainArgs):
        meta = f.metadata
        if "help" not in meta or f.name in skip:
            continue
        flag = meta.get("flag", "--" + f.name.replace("_", "-"))
        default = defaults.get(f.name, f.default)
        shown = f" {notes[f.name]}" if f.name in notes else ""  # cli.HelpFormatter shows the default
        if meta.get("inverse"):  # a False-by-default flag that turns the field off
            group.add_argument(flag, dest=f.name, action="store_false", default=True, help=meta["help"])
        elif f.type in (bool, "bool"):  # a default of None (a recipe decides): --flag and --no-flag
            choice = {"action": argparse.BooleanOptionalAction, "default": None} if default is None else \
                {"action": "store_true"}
            group.add_argument(flag, dest=f.name, help=meta["help"] + shown, **choice)
        else:
            kind = None if "choices" in meta else meta.get("type") or TYPES.get(f.type)
            group.add_argument(flag, dest=f.name, type=kind, choices=meta.get("choices"), default=default,
                               help=meta["help"] + shown)
    if not args_file:
        return
    group.add_argument("--args-file", type=Path, metavar="RUN/args.json",
                       help="rerun the run this file records: its arguments, but those given here (--resume and "
                            "--overwrite are never taken from it)")


def training_options(args, skip=()) -> dict:
    """The `TrainArgs` flags a parsed command line holds."""
    return {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainArgs)
            if "help" in f.metadata and f.name not in skip and hasattr(args, f.name)}


NOT_RERUN = ("resume", "overwrite")  # how a run folder is treated, not what the run is


def recorded_arguments(args) -> dict:
    """A parsed command line as a run's args.json records it (`extra.arguments`), for --args-file."""
    return {k: v for k, v in vars(args).items() if k not in ("args_file", "command_line")}


def apply_args_file(parser, argv: list[str]) -> None:
    """With --args-file among `argv`, the arguments that file records become `parser`'s defaults (so that those
    given on the command line win); a bad file is a one-line error naming it and the bad key or value."""
    if "--args-file" not in parser._option_string_actions:
        return
    first = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    first.add_argument("--args-file")
    try:
        path = first.parse_known_args(argv)[0].args_file
    except argparse.ArgumentError:
        return  # the parser itself reports it
    if path is None:
        return
    extra = read_json(path).get("extra")
    recorded = extra.get("arguments") if isinstance(extra, dict) else None
    if not isinstance(recorded, dict):
        raise BertforgeError(f"{path}: not the args.json of a run started from the command line "
                             "(it has no extra.arguments)")
    if f"bertforge {recorded.get('command')}" != parser.prog:
        raise BertforgeError(f"{path}: the arguments of bertforge {recorded.get('command')}, not of {parser.prog}")
    actions = {a.dest: a for a in parser._actions if a.dest != "help"}
    for key, value in recorded.items():
        if key == "command" or key in NOT_RERUN:
            continue
        if key not in actions:
            raise BertforgeError(f"{path}: {key!r} is not an argument of {parser.prog}")
        action = actions[key]
        try:
            action.default = recorded_value(action, value)
        except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
            raise BertforgeError(f"{path}: {key} {json.dumps(value)}: {e}") from None
        action.required = False
        if not action.option_strings and action.nargs is None:  # a positional argument the file gives
            action.nargs = "?"


def recorded_value(action, value):
    """A value from an args file, checked as the command line's would be by `action` (its type, its choices);
    the action's default is taken as it is, as argparse does (e.g. --time-budget's 0: no budget)."""
    if value is None and (action.required or not action.option_strings):
        raise ValueError("must be given")
    if value == action.default and type(value) is type(action.default):
        return value
    if action.nargs == 0:  # an on/off flag
        if not isinstance(value, bool):
            raise TypeError("expected true or false")
        return value
    if value is None:
        return None
    if action.nargs in ("+", "*"):
        if not isinstance(value, list):
            raise TypeError("expected a list")
        return [recorded_item(action, item) for item in value]
    return recorded_item(action, value)


def recorded_item(action, value):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError("expected a text or a number")
    if action.type is None and not isinstance(value, str):
        raise TypeError("expected a text")
    parsed = action.type(str(value)) if action.type else value
    if action.choices is not None and parsed not in action.choices:
        raise ValueError(f"expected one of {', '.join(map(str, action.choices))}")
    return parsed
