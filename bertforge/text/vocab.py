"""Vocabularies: vocab.txt (one token a line, id = line number) or the model of a tokenizer.json, with BERT's
special tokens, and whether a vocabulary is uncased; the tokens a tokenizer.json adds, the length a
tokenizer_config.json gives, and whether a vocabulary fits its model's embedding table, checked before the
vocabulary is built (a tokenizer.json too large for it before it is even parsed)."""

import os
from pathlib import Path

from ..core.errors import BertforgeError, where
from ..core.io import has_model_file, model_file, read_model_json, read_model_text

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# By attribute name, in transformers' order (its all_special_tokens).
SPECIAL_NAMES = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                 "mask_token": "[MASK]"}
MAX_VOCAB = 1 << 22  # tokens of any vocabulary, and so model/architectures/config.py's bound on vocab_size
# A tokenizer.json beside a model holds at most 1 MiB (a Unigram normalizer's character map is 0.3 MB) and 256 bytes
# a row of the model's embedding table; released ones hold under 100 bytes a token (ModernBERT's, merges included,
# 3.6 MB for 50,368 rows). Parsing takes 15 bytes of memory a byte of JSON: a larger file is refused unread.
PIPELINE_BYTES, TOKEN_BYTES = 1 << 20, 256


def read_vocab(path) -> dict[str, int]:
    """vocab.txt: one token per line, id = line number."""
    path = Path(path)
    if not os.path.lexists(path):
        raise BertforgeError(f"{path}: vocabulary file not found")
    # Lines end at \n, \r\n or \r, as in Python's text mode (and so transformers' load_vocab); other Unicode
    # line breaks can be part of a token.
    text = read_model_text(path).replace("\r\n", "\n").replace("\r", "\n")
    check_fits(text.count("\n") + (not text.endswith("\n")), path, path.parent)  # counted before any line is made
    lines = text.split("\n")
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


def read_pipeline(path) -> dict | None:
    """A tokenizer.json, None where there is none; one too large for the model beside it (PIPELINE_BYTES and
    TOKEN_BYTES a row of its embedding table) refused before it is read."""
    if not has_model_file(path):
        return None
    rows = model_rows(path.parent)
    size = model_file(path).stat().st_size
    if rows is not None and size > PIPELINE_BYTES + TOKEN_BYTES * rows[0]:
        raise BertforgeError(f"{path}: {size / 2**20:,.1f} MiB, too large for a vocabulary of the {rows[0]} rows of "
                             f"the model's embedding table ({rows[1]} vocab_size), which takes at most "
                             f"{(PIPELINE_BYTES + TOKEN_BYTES * rows[0]) / 2**20:,.1f} MiB (1 MiB and {TOKEN_BYTES} "
                             "bytes a row); refused unread")
    return read_model_json(path)


def vocab_of_pipeline(path, pipeline: dict) -> dict[str, int]:
    """The WordPiece vocabulary of a tokenizer.json (a folder saved by transformers 5 has no vocab.txt): ids 0 to
    n-1, as vocab.txt's lines."""
    model = pipeline.get("model")
    vocab = model_vocab(path, model)
    if not isinstance(vocab, dict):
        raise BertforgeError(f"{path}: the WordPiece model's vocab is {type(vocab).__name__}, not an object of "
                             "tokens to ids")
    if model.get("continuing_subword_prefix", "##") != "##":
        raise BertforgeError(f"{path}: continuing_subword_prefix {model['continuing_subword_prefix']!r} is not '##'")
    if max(vocab.values(), default=-1) != len(vocab) - 1:  # distinct ids (model_vocab): 0 to n-1, or one larger
        ids = set(vocab.values())
        skipped = next(i for i in range(len(vocab)) if i not in ids)
        raise BertforgeError(f"{path}: the WordPiece vocabulary's {len(vocab)} ids skip {skipped}; they must be 0 "
                             f"to {len(vocab) - 1}")
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        raise BertforgeError(f"{path}: vocabulary lacks the special tokens {' '.join(missing)}")
    return vocab


def model_vocab(path, model: dict) -> dict[str, int] | list:
    """A tokenizer.json model's vocabulary, checked: of tokens to ids (BPE, WordPiece, WordLevel), each id a whole
    number from 0 and one token's, the unknown-word token the model names among them; or a list (Unigram's, an
    id a place). Counted against the embedding table before the `tokenizers` library builds it."""
    if not isinstance(model, dict):
        raise BertforgeError(f"{path}: model is {type(model).__name__}, not an object (its type and vocab)")
    vocab = model.get("vocab")
    if not isinstance(vocab, (dict, list)):
        raise BertforgeError(f"{path}: the {model.get('type')} model's vocab is {type(vocab).__name__}, not its "
                             "tokens")
    check_fits(len(vocab), path, Path(path).parent)
    if isinstance(vocab, list):
        return vocab
    owner = {}
    for token, i in vocab.items():
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise BertforgeError(f"{path}: token {token!r} has id {i!r}, not a whole number from 0")
        if i in owner:
            raise BertforgeError(f"{path}: tokens {owner[i]!r} and {token!r} both have id {i}")
        owner[i] = token
    unk = model.get("unk_token")
    if unk is not None and unk not in vocab:
        raise BertforgeError(f"{path}: the {model.get('type')} model's unk_token {unk!r} is not in its vocab, so a "
                             "word outside the vocab could not be tokenized")
    return vocab


def looks_uncased(vocab) -> bool:
    """True when no ordinary token would change under lower-casing ([PAD], [unused0] and the like aside)."""
    return not any(t != t.lower() for t in vocab if not (t.startswith("[") and t.endswith("]")))


def check_pipeline(path, pipeline: dict) -> None:
    """A tokenizer.json of another kind than WordPiece, checked before the `tokenizers` library builds it: its
    model's vocabulary (model_vocab) and its added tokens, all their ids within the model's embedding table."""
    vocab = model_vocab(path, pipeline.get("model"))
    ends = [len(vocab) if isinstance(vocab, list) else max(vocab.values(), default=-1) + 1]
    check_fits(max(ends + [i + 1 for i, _, _ in added_entries(path, pipeline)]), path, Path(path).parent)


def model_rows(folder) -> tuple[int, str] | None:
    """The rows of the embedding table of the model `folder` holds (config.json's, or Google's bert_config.json's,
    vocab_size) and the file naming them; None where it holds no model."""
    for name in ("config.json", "bert_config.json"):
        path = Path(folder) / name
        if has_model_file(path, folder):
            rows = read_model_json(path, folder).get("vocab_size")
            return (rows, name) if isinstance(rows, int) and not isinstance(rows, bool) else None
    return None


def check_fits(ids: int, source, folder: Path) -> None:
    """A vocabulary of `ids` ids (its largest + 1, added tokens included) against the embedding table of the model
    `folder` holds, when it holds one (a token past the table's rows would fail inside the model), else against
    MAX_VOCAB."""
    rows = model_rows(folder)
    if rows is not None and ids > rows[0]:
        raise BertforgeError(f"{source}: the vocabulary has {ids} tokens, more than the {rows[0]} rows of the "
                             f"model's embedding table ({rows[1]} vocab_size); use the model's own vocabulary, or "
                             "resize its embeddings to the vocabulary")
    if ids > MAX_VOCAB:
        raise BertforgeError(f"{source}: the vocabulary has {ids} tokens, more than the {MAX_VOCAB:,} any model has")


def added_entries(path, pipeline: dict | None) -> list[tuple[int, str, bool]]:
    """(id, text, special) of every token a tokenizer.json adds, each with a whole-number id from 0."""
    given = (pipeline or {}).get("added_tokens") or []
    if not isinstance(given, list):
        raise BertforgeError(f"{path}: added_tokens must be a list, not {type(given).__name__}")
    added = []
    for k, token in enumerate(given):
        token_id = token.get("id") if isinstance(token, dict) else None
        if not isinstance(token_id, int) or isinstance(token_id, bool) or not isinstance(token.get("content"), str):
            raise BertforgeError(f"{path}: added_tokens[{k}] needs a whole-number \"id\" and a text \"content\" "
                                 f"({str(token)[:60]})")
        if token_id < 0:
            raise BertforgeError(f"{path}: added token {token['content']!r} has id {token_id}, not a whole number "
                                 "from 0")
        added.append((token_id, token["content"], bool(token.get("special", False))))
    return added


def added_tokens(path, pipeline: dict | None, size: int) -> list[tuple[int, str, bool]]:
    """(id, text, special) of the tokens a tokenizer.json adds after its vocabulary of `size`, in id order."""
    added = sorted(entry for entry in added_entries(path, pipeline) if entry[0] >= size)
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
