"""The WordPiece vocabulary learner: merges and ties worked out by hand, against a recount-every-merge oracle,
word counting against the tokenizer's own pipeline, and the same files from `tokenizer train` in two processes."""

import collections
import os
import random
import re
import subprocess
import sys
from itertools import islice

import pytest

from bertforge.pretraining.demo import module_documents
from bertforge.text.tokenizer import build_backend
from bertforge.text.vocab import SPECIAL_TOKENS
from bertforge.text.wordpiece import count_words, learn_vocab
from tests.conftest import require_shared

# The corpus of the Hugging Face course's WordPiece chapter. Alphabet b g h n p s u (ids 5-11), then the pieces
# that continue a word, ##g ##n ##s ##u (12-15). Pair counts: (##u, ##g) 20, (p, ##u) 17, (##u, ##n) 16,
# (h, ##u) 15, (##g, ##s) 5, (b, ##u) 4.
HUGS = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}
HUGS_START = ["b", "g", "h", "n", "p", "s", "u", "##g", "##n", "##s", "##u"]
# ##ug (20) leaves (h, ##ug) 15, (p, ##u) 12, (p, ##ug) 5, (##ug, ##s) 5; ##un (16) makes (p, ##un) 12 and
# (b, ##un) 4; then hug (15), pun (12); pug and hugs tie at 5, and p (id 9) entered the vocabulary before hug
# (id 18): pug first (text order would have put hugs first); bun (4) last.
HUGS_MERGES = ["##ug", "##un", "hug", "pun", "pug", "hugs", "bun"]


def learn(word_counts, vocab_size=100, **kw) -> list[str]:
    """The learnt tokens after the special tokens."""
    tokens = learn_vocab(word_counts, vocab_size, SPECIAL_TOKENS, **kw)
    assert tokens[:len(SPECIAL_TOKENS)] == SPECIAL_TOKENS
    return tokens[len(SPECIAL_TOKENS):]


def test_merges_and_the_tie_rule_by_hand():
    assert learn(HUGS) == HUGS_START + HUGS_MERGES
    # vocab_size counts every entry: specials, alphabet, ## pieces, merges
    assert learn(HUGS, vocab_size=5 + 11 + 5) == HUGS_START + HUGS_MERGES[:5]
    assert learn(HUGS, vocab_size=5 + 11) == HUGS_START


def test_min_frequency_stops_the_merges():
    assert learn(HUGS, min_frequency=5) == HUGS_START + HUGS_MERGES[:6]  # bun (4) is below
    assert learn(HUGS, min_frequency=6) == HUGS_START + HUGS_MERGES[:4]  # pug and hugs (5) are below
    assert learn(HUGS, min_frequency=21) == HUGS_START


def test_limit_alphabet_keeps_the_most_frequent_characters():
    # counts u 36, g 20, p 17, n 16, h 15, s 5, b 4, x 4: with 7, b and x tie and the lower code point stays
    assert learn({**HUGS, "x": 4}, limit_alphabet=7) == HUGS_START + HUGS_MERGES
    # with 6, b goes too: "bun" keeps ##u ##n (dropped characters are left out of the words, as the reference does)
    assert learn(HUGS, limit_alphabet=6) == HUGS_START[1:] + HUGS_MERGES[:-1]


def test_pieces_inside_words_merge_left_to_right():
    # a ##a ##a ##a: (##a, ##a) 6 -> a ##aa ##a, not a ##a ##aa; then (a, ##aa) and (##aa, ##a) tie at 3 and
    # a is the older entry: aaa ##a; then aaaa
    assert learn({"aaaa": 3}) == ["a", "##a", "##aa", "aaa", "aaaa"]
    # continuation pieces merge into continuation pieces: ##ab + ##le -> ##able
    tokens = learn({"table": 5, "cable": 5}, min_frequency=5)
    assert "##able" in tokens and "table" in tokens and "cable" in tokens


def oracle(word_counts, vocab_size, min_frequency) -> list[str]:
    """The same rules written another way (no alphabet limit): words as space-separated pieces, every pair
    recounted before each merge, a merge made by a regular expression."""
    alphabet = sorted({c for word in word_counts for c in word})
    inside = sorted({c for word in word_counts for c in word[1:]})
    tokens = [*SPECIAL_TOKENS, *alphabet, *("##" + c for c in inside)]
    words = {word: " ".join([word[0], *("##" + c for c in word[1:])]) for word in word_counts}
    while len(tokens) < vocab_size:
        pairs = collections.Counter()
        for word, pieces in words.items():
            pieces = pieces.split()
            for pair in zip(pieces, pieces[1:]):
                pairs[pair] += word_counts[word]
        if not pairs:
            break
        left, right = min(pairs, key=lambda p: (-pairs[p], tokens.index(p[0]), tokens.index(p[1])))
        if pairs[left, right] < min_frequency:
            break
        tokens.append(left + right[2:])
        pair = re.compile(rf"(?<!\S){re.escape(left)} {re.escape(right)}(?!\S)")
        words = {word: pair.sub(tokens[-1], pieces) for word, pieces in words.items()}
    return tokens


def test_incremental_counts_agree_with_recounting():
    """Small alphabets make ties and repeated pieces common; every merge makes a new entry."""
    rng = random.Random(0)
    for trial in range(300):
        letters = "ab" if trial % 2 else "abc"
        word_counts = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 7))): rng.randint(1, 6)
                       for _ in range(rng.randint(1, 12))}
        vocab_size, min_frequency = rng.randint(8, 40), rng.randint(1, 3)
        tokens = learn_vocab(word_counts, vocab_size, SPECIAL_TOKENS, min_frequency)
        assert tokens == oracle(word_counts, vocab_size, min_frequency), word_counts
        assert len(set(tokens)) == len(tokens)


TRICKY = ("Hello, World!  Tabs\tand\r\nWindows lines; NUL\x00in and \x1cfile\x1dseparators\x1e.\n"
          "\u3000ideographic\u00a0no-break\u2003em space, e\u0301 and \u0301a mark after a space.\n"
          "ΣΊΣΥΦΟΣ ΟΔΟΣ, İstanbul, Straße, ﬁnancial ½, 東京は日本の首都です。中文字符 カタカナ\n"
          "zero\u200bwidth \ufeffbom soft\u00adhyphen don't U.S.A. 1,000.50€ @user #tag\n\n  \n")


@pytest.mark.parametrize("lowercase", [True, False])
def test_count_words_matches_the_pipeline_on_the_whole_text(lowercase):
    backend = build_backend({}, lowercase)
    texts = [TRICKY * 3, "one more block\n", TRICKY[::-1]]
    expected = collections.Counter()
    for text in texts:
        normalized = backend.normalizer.normalize_str(text)
        expected.update(word for word, _ in backend.pre_tokenizer.pre_tokenize_str(normalized))
    assert count_words(texts, backend.normalizer, backend.pre_tokenizer) == expected


def test_count_words_on_a_real_book():
    text = require_shared("data", "corpus", "gutenberg", "austen-persuasion.txt").read_text(encoding="utf-8")
    backend = build_backend({}, True)
    expected = collections.Counter(w for w, _ in backend.pre_tokenizer.pre_tokenize_str(
        backend.normalizer.normalize_str(text)))
    assert count_words([text], backend.normalizer, backend.pre_tokenizer) == expected


def test_tokenizer_train_writes_the_same_files_in_two_processes(tmp_path):
    """Different hash seeds (the library trainer's ties followed a random hash order: three runs, three files)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, text in islice(module_documents(), 40):
        (corpus / f"{name}.txt").write_text(text, encoding="utf-8")
    written = []
    for seed in ("1", "2"):
        out = tmp_path / f"vocab-{seed}"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-m", "bertforge", "tokenizer", "train", "--input", str(corpus),
                        "--vocab-size", "3000", "--min-frequency", "1", "--out", str(out), "--no-progress"],
                       env=env, check=True, capture_output=True)
        written.append({name: (out / name).read_bytes() for name in ("vocab.txt", "tokenizer.json")})
    assert written[0] == written[1]
    assert len(written[0]["vocab.txt"].splitlines()) == 3000
