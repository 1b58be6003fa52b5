"""Command-line options: validated value types (one place for every command), and the training options,
declared once as `train.TrainArgs` fields and turned into flags here for `pretrain` and `finetune`.

A bad value is argparse's one-line usage error naming the flag and the problem, e.g.
``argument --batch-size: must be a whole number of at least 1, not 0``.
"""

import argparse
import dataclasses
import math


def _number(kind, text: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'a whole number' if kind is int else 'a number'}, not {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, not {text!r}")
    return value


def count(minimum: int = 1, maximum: int | None = None):
    """A whole number of at least `minimum` (and at most `maximum`)."""
    def parse(text: str) -> int:
        value = _number(int, text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least {minimum}, not {text}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum}, not {text}")
        return value
    parse.__name__ = "count"
    return parse


def positive(text: str) -> float:
    """A number above 0."""
    value = _number(float, text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def non_negative(text: str) -> float:
    value = _number(float, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def probability(text: str) -> float:
    """A number in [0, 1)."""
    value = _number(float, text)
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, not {text}")
    return value


def open_fraction(text: str) -> float:
    """A number strictly between 0 and 1."""
    value = _number(float, text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be above 0 and below 1, not {text}")
    return value


def share(text: str) -> float:
    """A number in [0, 1]."""
    value = _number(float, text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {text}")
    return value


def fraction_or_steps(text: str) -> float:
    """Warm-up: a fraction of the steps (below 1) or a whole number of steps."""
    value = non_negative(text)
    if value >= 1 and value != int(value):
        raise argparse.ArgumentTypeError(f"must be a fraction below 1 or a whole number of steps, not {text}")
    return value


def torch_device(text: str) -> str:
    """A torch device that this machine has: cpu, cuda, cuda:N (checked before any work starts)."""
    import torch

    try:
        chosen = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, not {text!r}") from None
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            raise argparse.ArgumentTypeError(f"{text}: CUDA is not available on this machine")
        if chosen.index is not None and chosen.index >= torch.cuda.device_count():
            raise argparse.ArgumentTypeError(f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif chosen.type != "cpu":
        raise argparse.ArgumentTypeError(f"{text}: only cpu and cuda devices are supported")
    return text


TYPES = {int: count(0), float: non_negative}  # the checks of fields that name no type of their own


def add_training_arguments(parser, defaults: dict, skip=()) -> None:
    """Flags for the `TrainArgs` fields (but those in `skip`), with this command's defaults."""
    from .train import TrainArgs

    group = parser.add_argument_group("training")
    for f in dataclasses.fields(TrainArgs):
        meta = f.metadata
        if "help" not in meta or f.name in skip:
            continue
        flag = meta.get("flag", "--" + f.name.replace("_", "-"))
        default = defaults.get(f.name, f.default)
        if meta.get("inverse"):  # a False-by-default flag that turns the field off
            group.add_argument(flag, dest=f.name, action="store_false", default=True, help=meta["help"])
        elif f.type in (bool, "bool"):
            group.add_argument(flag, dest=f.name, action="store_true", help=meta["help"])
        else:
            kind = meta.get("type") or TYPES.get(f.type) or TYPES.get({"int": int, "float": float}.get(f.type))
            shown = f" (default {default})" if default is not None else ""
            group.add_argument(flag, dest=f.name, type=kind, default=default, help=meta["help"] + shown)


def training_options(args, skip=()) -> dict:
    """The `TrainArgs` flags a parsed command line holds."""
    from .train import TrainArgs

    return {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainArgs)
            if "help" in f.metadata and f.name not in skip and hasattr(args, f.name)}
