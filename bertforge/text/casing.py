"""Whether a checkpoint's WordPiece tokenizer is uncased (lower case, accents stripped) or cased, as it was
trained: from its tokenizer_config.json (do_lower_case), its tokenizer.json's normalizer, or one of Google's folders'
name and vocabulary; a `do_lower_case` asked for that contradicts it is a one-line error, since a model read with
the other casing gives wrong results without failing."""

import re
from pathlib import Path

from ..core.errors import BertforgeError
from .vocab import looks_uncased


def casing_from_name(name: str) -> bool | None:
    """True where a checkpoint's name says uncased, False where it says cased (Google's `uncased_L-12_H-768_A-12`,
    `multi_cased_L-12_H-768_A-12`, the reference's `bert-base-cased`), None where it says neither."""
    words = re.split(r"[^a-z]+", name.lower())
    return True if "uncased" in words else False if "cased" in words else None


def casing_contradiction(source, trained_lower: bool, why: str, setting: str) -> BertforgeError:
    trained = "uncased" if trained_lower else "cased"
    return BertforgeError(f"{source}: the checkpoint was trained {trained} ({why}); {setting} contradicts it")


def google_casing(vocab_file: Path, vocab) -> tuple[bool, str]:
    """The casing of one of Google's checkpoint folders (which have no tokenizer_config.json): from its name,
    which must agree with the vocabulary (an uncased one has no capitals), else from the vocabulary; and why."""
    by_vocab = looks_uncased(vocab)
    vocab_says = f"{vocab_file.name} has {'no ' if by_vocab else ''}capitals"
    by_name = casing_from_name(vocab_file.parent.name)
    if by_name is None:
        return by_vocab, vocab_says
    name_says = f"its name {vocab_file.parent.name!r} says so"
    if by_name != by_vocab:
        raise casing_contradiction(vocab_file.parent, by_name, name_says, f"{vocab_says}, which")
    return by_name, name_says


def trained_casing(vocab_file: Path, vocab, config: dict, json_file: Path, pipeline: dict | None):
    """How the checkpoint was trained, True for uncased (None where no file says), where that is read and why: its
    tokenizer_config.json (`config`), else its tokenizer.json's normalizer, else a Google folder's (google_casing)."""
    trained_lower = config.get("do_lower_case")
    source, why = vocab_file.parent / "tokenizer_config.json", f"do_lower_case={str(trained_lower).lower()}"
    if trained_lower is None and pipeline is not None:
        trained_lower = (pipeline.get("normalizer") or {}).get("lowercase")
        source, why = json_file, f"its normalizer has lowercase={str(trained_lower).lower()}"
    if trained_lower is None and (vocab_file.parent / "bert_config.json").is_file():
        trained_lower, why = google_casing(vocab_file, vocab)
        source = vocab_file.parent
    return trained_lower, source, why


def lower_case(do_lower_case: bool | None, vocab_file: Path, vocab, config: dict, json_file: Path,
               pipeline: dict | None) -> bool:
    """Whether the tokenizer read from `vocab_file` lowercases: `do_lower_case` where given, else as trained
    (trained_casing), else as the vocabulary looks (looks_uncased); a one-line error for a contradiction, or for
    tokenizer_config.json options that the casing does not support."""
    trained_lower, source, why = trained_casing(vocab_file, vocab, config, json_file, pipeline)
    if trained_lower is not None and do_lower_case is not None and do_lower_case != trained_lower:
        raise casing_contradiction(source, trained_lower, why, f"do_lower_case={do_lower_case}")
    if do_lower_case is None:
        do_lower_case = trained_lower if trained_lower is not None else looks_uncased(vocab)
    for option, supported in (("strip_accents", do_lower_case), ("tokenize_chinese_chars", True)):
        if config.get(option) not in (None, supported):
            raise BertforgeError(f"{vocab_file.parent / 'tokenizer_config.json'}: {option}={config[option]} is not "
                                 f"supported with do_lower_case={do_lower_case}")
    return do_lower_case
