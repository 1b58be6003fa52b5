"""Long inputs cut for pipelines and the server (bertforge/windows.py): tokenized in pieces, windowed."""

import numpy as np
import pytest

from bertforge.inference import windows

PARTS = ["Angela", "Merkel", "visited", "Reykjavík", "☃", "東京都", "naïve", "e\u0301", "\u0301x", "a\x1cb", "don't",
         "x" * 150, "\t", "\n", "  ", "U.S.A.", "İstanbul", "\u3000", "ﬁ", "!!", "\x00", "\r\n"]


def test_a_long_text_tokenized_in_pieces_gives_its_tokens(tokenizer, monkeypatch):
    """Pieces of 30 characters (cut after a space, a tab or a line end; never at \\x1c, which \\s matches but the
    normaliser deletes) and calls of 70: the ids and character offsets of the whole text at once."""
    monkeypatch.setattr(windows, "PIECE_CHARS", 30)
    monkeypatch.setattr(windows, "CALL_CHARS", 70)
    backend = tokenizer.backend_tokenizer
    rng = np.random.default_rng(0)
    texts = ["".join(PARTS[i] + " " * (rng.random() < 0.6) for i in rng.integers(0, len(PARTS), rng.integers(1, 80)))
             for _ in range(200)] + ["y" * 100, " " * 100, "short"]
    for text, (ids, offsets) in zip(texts, windows.encode_long(backend, texts)):
        whole = backend.encode(text, add_special_tokens=False)
        assert ids.tolist() == whole.ids, repr(text)
        assert [tuple(o) for o in offsets.tolist()] == whole.offsets, repr(text)


@pytest.mark.parametrize("text, starts", [("a b c", [0]), ("word " * 10, [0, 30]), ("x" * 40 + " y", [0, 41]),
                                          ("x" * 70, [0])])
def test_pieces_hold_whole_words(monkeypatch, text, starts):
    monkeypatch.setattr(windows, "PIECE_CHARS", 30)
    assert windows.piece_starts(text) == starts


def test_a_text_head_gives_the_first_tokens_of_the_whole_text(tokenizer):
    """Beginnings from 16 characters on, doubled: cut inside a word, inside [MASK], after a combining accent's
    letter; the head's first tokens + 1 are the whole text's (a head shorter than the text is only given where it
    holds more than that)."""
    backend = tokenizer.backend_tokenizer
    rng = np.random.default_rng(1)
    texts = ["".join(PARTS[i] + " " * (rng.random() < 0.6) for i in rng.integers(0, len(PARTS), rng.integers(1, 300)))
             for _ in range(100)]
    texts += ["[MASK]" * 100, "." * 1000, "x" * 1000 + " word" * 50, "\x1c" * 1000 + " a" * 50, "e\u0301" * 500]
    for text in texts:
        for tokens in (1, 8, 40):
            head = windows.text_head(backend, text, tokens, chars=16)
            assert text.startswith(head)
            ours = backend.encode(head, add_special_tokens=False).ids
            whole = backend.encode(text, add_special_tokens=False).ids
            assert ours[:tokens + 1] == whole[:tokens + 1], (repr(text[:80]), tokens)
            assert head == text or len(ours) > tokens


def test_a_huge_text_is_not_tokenized_whole(tokenizer):
    backend = tokenizer.backend_tokenizer
    assert len(windows.text_head(backend, "word " * 800_000, 128)) == windows.HEAD_CHARS
    assert len(windows.text_head(backend, "." * 4_000_000, 512)) == windows.HEAD_CHARS
    assert windows.text_head(backend, "short text", 128) == "short text"
