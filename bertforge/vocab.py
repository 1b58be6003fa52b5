"""Vocabularies: vocab.txt (one token a line, id = line number) or the WordPiece model of a tokenizer.json,
with BERT's special tokens, and whether a vocabulary is uncased."""

from pathlib import Path

from .errors import BertforgeError, where
from .io import read_text

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# By attribute name, in transformers' order (its all_special_tokens).
SPECIAL_NAMES = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}


def read_vocab(path) -> dict[str, int]:
    """vocab.txt: one token per line, id = line number."""
    path = Path(path)
    if not path.is_file():
        raise BertforgeError(f"{path}: vocabulary file not found")
    # Lines end at \n, \r\n or \r, as in Python's text mode (and so transformers' load_vocab); other Unicode
    # line breaks can be part of a token.
    lines = read_text(path).replace("\r\n", "\n").replace("\r", "\n").split("\n")
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
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertforgeError(f"{path}: vocabulary lacks the special tokens {' '.join(missing)}")
    return vocab


def looks_uncased(vocab) -> bool:
    """True when no ordinary token would change under lower-casing ([PAD], [unused0] and the like aside)."""
    return not any(t != t.lower() for t in vocab if not (t.startswith("[") and t.endswith("]")))
