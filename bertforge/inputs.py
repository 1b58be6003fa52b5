"""What a pipeline is given, checked (pipelines.py): texts, one input or a list of them, counts; and how an
error names an input (inputs, or inputs[i] where a list was given)."""

from .errors import BertforgeError


def check_text(value, name: str) -> str:
    if not isinstance(value, str):
        raise BertforgeError(f"{name} is {type(value).__name__}, expected a text")
    if not value.strip():
        raise BertforgeError(f"{name} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate: JSON's "\ud800" escape, which no text encoding holds
        raise BertforgeError(f"{name} is not valid Unicode: a lone surrogate \\u{ord(value[e.start]):04x} at "
                             f"character {e.start}") from None
    return value


def input_name(prepared, i: int) -> str:
    """How errors name the i-th input: inputs, or inputs[i] where a list was given."""
    return "inputs" if prepared.single else f"inputs[{i}]"


def as_list(inputs, is_one) -> tuple[list, bool]:
    """The inputs as a list, and whether a single one was given (is_one tells a single input)."""
    if is_one(inputs):
        return [inputs], True
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise BertforgeError(f"inputs is {type(inputs).__name__ if inputs else 'empty'}, expected an input or a "
                             f"non-empty list of them")
    return list(inputs), False


def check_count(options: dict, name: str):
    value = options[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BertforgeError(f"{name} must be a whole number of at least 1, not {value!r}")
