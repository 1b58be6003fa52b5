"""Validated command-line value types, one place for every command: a bad value is argparse's one-line usage
error naming the flag and the problem, e.g. ``argument --batch-size: must be a whole number of at least 1, not 0``.
"""

import argparse
import math
import re


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


# The ONNX operator sets `export onnx` writes: attention (scaled_dot_product_attention) needs 14; 20 is the last
# of torch's TorchScript exporter.
ONNX_OPSETS = (14, 20)


def onnx_opset(text: str) -> int:
    """An ONNX operator set version the export can write."""
    return count(*ONNX_OPSETS)(text)


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


def header_token(text: str) -> str:
    """A secret sent in an HTTP header (an API key): printable ASCII without spaces."""
    if not text or not all(33 <= ord(c) <= 126 for c in text):
        raise argparse.ArgumentTypeError("must be one or more printable ASCII characters without spaces (it is sent "
                                         "in a header)")
    return text


HOST_NAME = re.compile(r"[a-z0-9_.:-]+")


def host_names(text: str) -> tuple[str, ...]:
    """Host names or addresses, comma-separated, as a Host header names them (a port is not part of it); *: any."""
    names = tuple(name.strip().lower().removeprefix("[").removesuffix("]").rstrip(".") for name in text.split(","))
    if names == ("*",):
        return names
    bad = next((name for name in names if not HOST_NAME.fullmatch(name)), None)
    if bad is not None:
        raise argparse.ArgumentTypeError(f"expected host names or addresses separated by commas (or *), not "
                                         f"{bad!r} in {text!r}")
    return names


def device_problem(text: str, kinds=("cpu", "cuda")) -> str | None:
    """What makes `text` unusable as a torch device of one of these kinds on this machine, or None."""
    import torch

    try:
        chosen = torch.device(text)
    except RuntimeError:
        return f"{text!r} is not a device (expected {', '.join(kinds)} or cuda:N)"
    if chosen.type not in kinds:
        return f"{text}: only {', '.join(kinds[:-1])} and {kinds[-1]} devices are supported"
    if chosen.type == "cuda":
        if not torch.cuda.is_available():
            return f"{text}: CUDA is not available on this machine"
        if chosen.index is not None and chosen.index >= torch.cuda.device_count():
            return f"{text}: this machine has {torch.cuda.device_count()} CUDA device(s)"
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        return f"{text}: MPS is not available on this machine"
    return None


DEVICE_HELP = "cpu, cuda or cuda:N (default: cuda when present, else cpu)"


def add_device_argument(parser) -> None:
    """--device of every command that runs a model, one default for all (runtime.pick_device)."""
    parser.add_argument("--device", type=torch_device, help=DEVICE_HELP)


def torch_device(text: str) -> str:
    """A torch device that this machine has: cpu, cuda, cuda:N (checked before any work starts)."""
    problem = device_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def old_spellings(action, *names: str):
    """Mark `names`, among an option's strings, as old spellings: still accepted, not shown in --help
    (cli.HelpFormatter). One name per concept across commands; see docs/ARCHITECTURE.md."""
    action.old_spellings = names
    return action


def add_revision_argument(parser, model: str = "the model") -> None:
    """--revision of the commands that read a model, which may be given by its Hub name (core/hub.py)."""
    parser.add_argument("--revision", help=f"the branch, tag or commit of {model} to read, where it is given by its "
                        "Hub name (default: main)")


def add_encoding_argument(parser) -> None:
    """--encoding of the commands that read text files (`decoding.decoded_blocks` tries the fallbacks)."""
    parser.add_argument("--encoding", default="utf-8", help="text encoding of the input files, or fallbacks tried "
                        "in order per line: cp1252 for Windows text, utf-8,cp1252 for a mix")


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"(\d+(?:\.\d*)?)([smhd])")


def duration(text: str) -> float:
    """Seconds in '90s', '45m', '4h', '1h30m' or a plain number of seconds, 0 or more; argparse type of the
    training --time-budget, whose 0 (as its default) means no budget."""
    t = text.strip().lower()
    try:
        seconds = float(t)
    except ValueError:
        parts = DURATION.findall(t)
        seconds = sum(float(n) * UNITS[u] for n, u in parts) if "".join(n + u for n, u in parts) == t else -1
    if not (math.isfinite(seconds) and seconds >= 0):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration such as 90s, 45m, 4h or 1h30m (0: none)")
    return seconds


def positive_duration(text: str) -> float:
    """A `duration` above 0: the time something runs for, where none would be never-ending (the demo's budget)."""
    seconds = duration(text)
    if not seconds:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration above 0 such as 90s, 45m or 4h")
    return seconds
