"""What a pipeline is given, checked (pipelines.py): texts, token ids, one input or a list of them, counts; and
how an error names an input (inputs, or inputs[i] where a list was given)."""

from ..core.errors import BertforgeError


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


def is_ids(value) -> bool:
    """Whether `value` is token ids: a non-empty list of whole numbers (not of texts, not of lists)."""
    return isinstance(value, list) and bool(value) and all(isinstance(x, int) and not isinstance(x, bool)
                                                             for x in value)


def check_ids(value, name: str, vocab_size: int) -> list[int]:
    if not is_ids(value):
        raise BertforgeError(f"{name} is {'empty' if value == [] else type(value).__name__}, expected a text or "
                             "token ids (a list of whole numbers)")
    outside = next((i for i in value if not 0 <= i < vocab_size), None)
    if outside is not None:
        raise BertforgeError(f"{name}: token id {outside} is outside the vocabulary (0 to {vocab_size - 1})")
    return value


def id_row(ids: list[int], max_length: int) -> dict:
    """A model input of token ids as given (one segment), cut to max_length."""
    return {"input_ids": ids[:max_length], "token_type_ids": [0] * min(len(ids), max_length)}


def check_masks(prepared, rows: list, mask: str, mask_id: int, max_length: int, too_long) -> None:
    """Each text given to fill-mask holds a [MASK], and its row (the text's first max_length tokens) every one of
    them: one past them is refused (`too_long`, the server's 413), never left out of the answer."""
    for i, (text, row) in enumerate(zip(prepared.items, rows)):
        if mask not in text:
            raise BertforgeError(f"{input_name(prepared, i)} has no {mask} token")
        given = text.count(mask)
        if (cut := given - row["input_ids"].count(mask_id)) > 0:
            raise too_long(f"{input_name(prepared, i)}: {cut} of its {given} {mask} tokens lie past its first "
                           f"{max_length} tokens, all that fill-mask reads (the model's length): put each {mask} "
                           "within them")
