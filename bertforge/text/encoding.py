"""What the tokenizer is given and returns: texts, pairs or words checked (`check_texts`), a pair truncated to
a budget by the reference's strategies (`truncated_lengths`), and the model's inputs by name (a dict, also read
as attributes), with per row where each token came from (its word, its text of the pair, its characters), as
transformers' BatchEncoding."""

import logging
import sys

import numpy as np

from ..core.errors import BertforgeError

log = logging.getLogger("bertforge")


class Encoding(dict):
    """input_ids, token_type_ids, attention_mask (and offset_mapping, special_tokens_mask,
    overflow_to_sample_mapping when asked); `rows` hold each row's word_ids, sequence_ids and offsets (none where
    `pad` made the encoding of features, which hold no texts)."""

    def __init__(self, data, rows: list[dict] | None = None):
        super().__init__(data)
        self._rows = rows

    def _row(self, i: int) -> dict:
        if self._rows is None:
            raise BertforgeError("an encoding padded from features (tokenizer.pad) has no word ids, sequence ids or "
                                 "offsets: tokenize the texts for them")
        return self._rows[i]

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device) -> "Encoding":
        """The tensors moved to `device` (in place, as transformers does); returns self. Anything but a device
        (a dtype, say) leaves them as they are, with a warning, as transformers does."""
        import torch

        if not isinstance(device, (str, torch.device, int)):
            log.warning(f"Encoding.to({device!r}): not a device, so the tensors stay as they are (ids must stay "
                        "integers)")
            return self
        for key, value in self.items():
            if isinstance(value, torch.Tensor):
                self[key] = value.to(device)
        return self

    def word_ids(self, batch_index=0) -> list[int | None]:
        """For each token, the index of the word it came from in its own text; None for special tokens and padding."""
        return list(self._row(batch_index)["word_ids"])

    def sequence_ids(self, batch_index=0) -> list[int | None]:
        """For each token, 0 (the text) or 1 (the pair text); None for special tokens and padding."""
        return list(self._row(batch_index)["sequence_ids"])

    def char_to_token(self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0):
        """The token holding character `char_index` of the text (sequence_index 0) or of the pair text (1);
        None where no token does (a space). As transformers: with one argument, the character of row 0."""
        row, char = (0, batch_or_char_index) if char_index is None else (batch_or_char_index, char_index)
        meta = self._row(row)
        for token, (sequence, (start, end)) in enumerate(zip(meta["sequence_ids"], meta["offsets"])):
            if sequence == sequence_index and start <= char < end:
                return token
        return None


def as_tensors(data: dict, return_tensors: str | None) -> dict:
    """Each value as one tensor ("pt") or array ("np"), of the dtype its values give (ids int64, float labels float),
    as transformers' BatchEncoding; None: as given. Rows of different lengths are refused by key."""
    if return_tensors is None:
        return data
    if return_tensors == "pt":
        import torch

        def convert(value):
            return torch.tensor(value, dtype=torch.long if is_empty(value) else None)
    else:
        def convert(value):
            return np.asarray(value, dtype=np.int64 if is_empty(value) else None)
    tensors = {}
    for key, value in data.items():
        try:
            tensors[key] = convert(value)
        except ValueError:
            raise BertforgeError(f"{key} has rows of different lengths, which make no tensor: pass padding=True (which "
                                 "pads the model's inputs; a collator pads other keys such as labels)") from None
    return tensors


def is_empty(value) -> bool:
    """Whether a (nested) list holds no value at all."""
    return isinstance(value, (list, tuple)) and all(map(is_empty, value))


def check_texts(text, text_pair, batch=True, words=False) -> tuple[list, list | None, bool]:
    """The texts (and pair texts) as lists, and whether one text was given; or a BertforgeError naming the
    argument that is not a string. With `words` (is_split_into_words), a text is a list of words."""
    def one(value):
        return is_words(value) if words else isinstance(value, str)

    kind = "list of str (words)" if words else "str"
    if one(text):
        if text_pair is not None and not one(text_pair):
            raise BertforgeError(f"text_pair is {type(text_pair).__name__}, expected {kind} (as text is)")
        return [text], None if text_pair is None else [text_pair], True
    if not batch or not isinstance(text, (list, tuple)):
        raise BertforgeError(f"text is {type(text).__name__}, expected {kind}" + (" or a list of them" * batch))
    for name, values in (("text", text), ("text_pair", text_pair)):
        if values is None:
            continue
        if not isinstance(values, (list, tuple)):
            raise BertforgeError(f"{name} is {type(values).__name__}, expected a list of {kind} (as text is)")
        for i, value in enumerate(values):
            if not one(value):
                raise BertforgeError(f"{name}[{i}] is {type(value).__name__}, expected {kind}")
    if text_pair is not None and len(text_pair) != len(text):
        raise BertforgeError(f"text has {len(text)} items but text_pair has {len(text_pair)}")
    return list(text), None if text_pair is None else list(text_pair), False


def is_words(value) -> bool:
    return isinstance(value, (list, tuple)) and all(isinstance(w, str) for w in value)


def truncated_lengths(n1: int, n2: int, is_pair: bool, budget: int, strategy, max_length: int) -> tuple[int, int]:
    """How many tokens of the text (n1) and of the pair text (n2) to keep so that together they fit in `budget`.

    longest_first trims the longer text; when both must be cut, the budget is split evenly and the odd token goes
    to the text that was longer. That is the Hugging Face rule; Google's one-token-at-a-time loop gives the odd
    token to the first text instead.
    """
    if budget < 0:
        raise BertforgeError(f"max_length={max_length} leaves no room for the special tokens")
    if n1 + n2 <= budget:
        return n1, n2
    if strategy in (True, "longest_first"):
        if not is_pair:
            return budget, 0
        short = min(n1, n2)
        keep_short, keep_long = (short, budget - short) if 2 * short <= budget else (budget // 2, budget - budget // 2)
        return (keep_long, keep_short) if n1 > n2 else (keep_short, keep_long)
    if strategy == "only_second" and not is_pair:
        raise BertforgeError(f"truncation='only_second' needs text_pair: the text alone is {n1} tokens, "
                             f"over max_length={max_length}")
    other = n2 if strategy == "only_first" else n1
    if budget - other <= 0:
        raise BertforgeError(f"truncation={strategy!r} cannot fit max_length={max_length}: the other text alone "
                             f"is {other} tokens")
    return (budget - other, n2) if strategy == "only_first" else (n1, budget - other)


def as_list(ids):
    """Python values from a tensor or array, or from a list of them; anything else unchanged."""
    if hasattr(ids, "tolist"):
        return ids.tolist()
    return [as_list(value) for value in ids] if isinstance(ids, (list, tuple)) else ids


def tensor_kind(value) -> str | None:
    """"pt" for a torch tensor, "np" for a numpy array, else None (without importing torch)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return "pt"
    return "np" if isinstance(value, np.ndarray) else None
