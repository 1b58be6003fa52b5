"""Vocabularies: vocab.txt (one token a line, id = line number) or the WordPiece model of a tokenizer.json,
with BERT's special tokens, and whether a vocabulary is uncased; the tokens a tokenizer.json adds, the length a
tokenizer_config.json gives, and whether a vocabulary fits its model's embedding table."""

import os
from pathlib import Path

from ..core.errors import BertforgeError, where
from ..core.io import has_model_file, read_model_json, read_model_text

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# By attribute name, in transformers' order (its all_special_tokens).
SPECIAL_NAMES = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}


def read_vocab(path) -> dict[str, int]:
    """vocab.txt: one token per line, id = line number."""
    path = Path(path)
    if not os.path.lexists(path):
        raise BertforgeError(f"{path}: vocabulary file not found")
    # Lines end at \n, \r\n or \r, as in Python's text mode (and so transformers' load_vocab); other Unicode
    # line breaks can be part of a token.
    lines = read_model_text(path).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    vocab = {}
    for line_no, token in enumerate(lines, start=1):
        if token in vocab:
            raise BertforgeError(f"{where(path, line_no)}: token {token!r} already on line {vocab[token] + 1}")
        vocab[token] = line_no - 1
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertforgeError(f"{path}: vocabulary lacks the special tokens {' '.join(missing)}")
    return vocab


def vocab_of_pipeline(path, pipeline: dict) -> dict[str, int]:
    """The WordPiece vocabulary of a tokenizer.json (a folder saved by transformers 5 has no vocab.txt)."""
    model = pipeline.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise BertforgeError(f"{path}: not a WordPiece tokenizer (model type {model.get('type')!r})")
    if model.get("continuing_subword_prefix", "##") != "##":
        raise BertforgeError(f"{path}: continuing_subword_prefix {model['continuing_subword_prefix']!r} is not '##'")
    vocab = model["vocab"]
    ids = list(vocab.values())
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids) or len(set(ids)) != len(ids):
        raise BertforgeError(f"{path}: the vocabulary's ids must be distinct whole numbers from 0")
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertforgeError(f"{path}: vocabulary lacks the special tokens {' '.join(missing)}")
    return vocab


def looks_uncased(vocab) -> bool:
    """True when no ordinary token would change under lower-casing ([PAD], [unused0] and the like aside)."""
    return not any(t != t.lower() for t in vocab if not (t.startswith("[") and t.endswith("]")))


def check_fits(ids: int, source, folder: Path) -> None:
    """A vocabulary of `ids` ids (its largest + 1, added tokens included) against the embedding table of the model
    `folder` holds (config.json's, or Google's bert_config.json's, vocab_size), when it holds one: a token past the
    table's rows would fail inside the model."""
    for name in ("config.json", "bert_config.json"):
        path = Path(folder) / name
        if has_model_file(path, folder):
            rows = read_model_json(path, folder).get("vocab_size")
            if isinstance(rows, int) and ids > rows:
                raise BertforgeError(f"{source}: the vocabulary has {ids} tokens, more than the {rows} rows of the "
                                     f"model's embedding table ({path.name} vocab_size); use the model's own "
                                     "vocabulary, or resize its embeddings to the vocabulary")
            return


def added_tokens(path, pipeline: dict | None, size: int) -> list[tuple[int, str, bool]]:
    """(id, text, special) of the tokens a tokenizer.json adds after its vocabulary of `size`, in id order."""
    given = (pipeline or {}).get("added_tokens") or []
    if not isinstance(given, list):
        raise BertforgeError(f"{path}: added_tokens must be a list, not {type(given).__name__}")
    added = []
    for k, token in enumerate(given):
        token_id = token.get("id") if isinstance(token, dict) else None
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not isinstance(token.get("content"), str):
            raise BertforgeError(f"{path}: added_tokens[{k}] needs a whole-number \"id\" and a text \"content\" "
                                 f"({str(token)[:60]})")
        if token_id >= size:
            added.append((token_id, token["content"], bool(token.get("special", False))))
    added.sort()
    for i, (token_id, token, _) in enumerate(added):
        if token_id != size + i:
            raise BertforgeError(f"{path}: added token {token!r} has id {token_id}, expected {size + i}")
    return added


def max_length_of(path, config: dict, default: int) -> int:
    """tokenizer_config.json's model_max_length: a whole number (or its text); transformers' int(1e30), "no
    limit", and none given are `default`."""
    value = config.get("model_max_length")
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BertforgeError(f"{path}: model_max_length {value!r} is not a whole number of at least 1")
    return default if value > 1_000_000 else value
