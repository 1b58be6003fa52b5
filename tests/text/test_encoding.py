"""The tokenizer's transformers options and what it returns (Encoding), against transformers' tokenizer on the
same vocabulary and inputs: words given split, windows with a stride, padding to a multiple, the per-token maps."""

import pytest
import torch
import transformers

from bertforge.core.errors import BertforgeError
from bertforge.text.tokenizer import BertTokenizer

transformers.logging.set_verbosity_error()

TEXTS = ["The quick brown fox jumps over the lazy dog, twice.", "Tokenization splits unfamiliar words: naïve café!",
         "short", "A rather longer sentence, with several clauses, that will need more than one window of tokens "
         "when the windows are small; it goes on and on so that there are three."]
QUESTIONS = ["Who jumps?", "Why?", "What is it?", "x"]
PAIRS = ["Who jumps?", "What splits words into pieces, and why would anyone do that?", "long " * 40, "x"]


@pytest.fixture(scope="module")
def both(tokenizer):
    from tests.conftest import require_shared

    return tokenizer, transformers.AutoTokenizer.from_pretrained(require_shared("models", "all-MiniLM-L6-v2"))


def assert_same(ours, ref, keys=None):
    assert set(ours) == set(ref.keys()), (set(ours), set(ref.keys()))
    for key in keys or ours:
        value = ours[key]
        value = value.tolist() if torch.is_tensor(value) else value
        expected = ref[key].tolist() if torch.is_tensor(ref[key]) else ref[key]
        assert value == [list(map(tuple, r)) if key == "offset_mapping" else r for r in expected] \
            if key == "offset_mapping" and value and isinstance(value[0], list) else value == expected, key


@pytest.mark.parametrize("options", [
    dict(), dict(padding=True), dict(padding=True, pad_to_multiple_of=8), dict(padding="max_length", max_length=30,
                                                                              pad_to_multiple_of=16),
    dict(padding=True, max_length=32, pad_to_multiple_of=16, truncation=True),
    dict(return_token_type_ids=False), dict(return_attention_mask=False, return_token_type_ids=True),
    dict(truncation=True, max_length=12, return_overflowing_tokens=True, stride=4),
    dict(truncation=True, max_length=20, return_overflowing_tokens=True, stride=0, padding=True),
    dict(return_overflowing_tokens=True),  # without truncation: one row per text, and the mapping
    dict(pad_to_multiple_of=8),  # without padding: no effect
], ids=str)
def test_options_as_transformers(both, options):
    ours, ref = both
    for texts in (TEXTS, TEXTS[1]):
        assert_same(ours(texts, **options), ref(texts, **options))
    if options.get("return_overflowing_tokens") and options.get("truncation"):  # pairs: windows of the pair text
        pair_options = {**options, "truncation": "only_second"}
        a, b = ours(QUESTIONS, TEXTS, **pair_options), ref(QUESTIONS, TEXTS, **pair_options)
        assert_same(a, b)
        for i in range(len(a["input_ids"])):
            assert a.sequence_ids(i) == b.sequence_ids(i) and a.word_ids(i) == b.word_ids(i)
    else:
        assert_same(ours(TEXTS, PAIRS, **options), ref(TEXTS, PAIRS, **options))


def test_windows_that_cannot_hold_the_question(both):
    ours, ref = both
    options = dict(truncation="only_second", max_length=12, stride=4, return_overflowing_tokens=True)
    with pytest.raises(Exception, match="too short"):
        ref(PAIRS, TEXTS, **options)
    with pytest.raises(BertforgeError, match="too short"):
        ours(PAIRS, TEXTS, **options)


def test_truncation_length_must_be_a_multiple(both):
    ours, ref = both
    options = dict(padding=True, truncation=True, max_length=30, pad_to_multiple_of=16)
    with pytest.raises(ValueError, match="multiple of pad_to_multiple_of"):
        ref(TEXTS, **options)
    with pytest.raises(BertforgeError, match="multiple of pad_to_multiple_of"):
        ours(TEXTS, **options)


def test_tensors_with_overflow(both):
    ours, ref = both
    options = dict(truncation=True, max_length=16, stride=5, return_overflowing_tokens=True, padding=True,
                   return_tensors="pt")
    a, b = ours(TEXTS, **options), ref(TEXTS, **options)
    assert set(a) == set(b.keys())
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_words_given_split(both):
    ours, ref = both
    words = [t.split() for t in TEXTS]
    pair_words = [t.split() for t in PAIRS]
    for args in ((words,), (words[0],), (words, pair_words), (words[0], pair_words[0])):
        for options in (dict(), dict(padding=True, return_offsets_mapping=True), dict(truncation=True, max_length=10)):
            a = ours(*args, is_split_into_words=True, **options)
            b = ref(*args, is_split_into_words=True, **options)
            assert_same(a, b, ["input_ids", "token_type_ids", "attention_mask"])
            rows = len(a["input_ids"]) if isinstance(a["input_ids"][0], list) else 1
            for i in range(rows):
                assert a.word_ids(i) == b.word_ids(i) and a.sequence_ids(i) == b.sequence_ids(i)


def test_per_token_maps(both):
    ours, ref = both
    a, b = ours(TEXTS, PAIRS, padding=True), ref(TEXTS, PAIRS, padding=True)
    for i in range(len(TEXTS)):
        assert a.word_ids(i) == b.word_ids(i)
        assert a.sequence_ids(i) == b.sequence_ids(i)
        for sequence, text in ((0, TEXTS[i]), (1, PAIRS[i])):
            for char in range(len(text) + 1):
                assert a.char_to_token(i, char, sequence_index=sequence) == \
                       b.char_to_token(i, char, sequence_index=sequence), (i, char, sequence)
    one, one_ref = ours(TEXTS[0]), ref(TEXTS[0])
    assert [one.char_to_token(c) for c in range(len(TEXTS[0]))] == [one_ref.char_to_token(c)
                                                                     for c in range(len(TEXTS[0]))]
    assert one.input_ids == one_ref.input_ids  # keys read as attributes


def test_to_device(both):
    ours, ref = both
    batch = ours(TEXTS, padding=True, return_tensors="pt")
    assert batch.to("cpu") is batch and batch.to(torch.device("cpu"))["input_ids"].device == torch.device("cpu")
    # a dtype is not a device: both leave the ids as integers (and warn)
    assert batch.to(torch.float64)["input_ids"].dtype == ref(TEXTS, padding=True, return_tensors="pt").to(
        torch.float64)["input_ids"].dtype == torch.long


def test_special_tokens_vocabulary_and_decoding(both):
    ours, ref = both
    for name in ("mask", "cls", "sep", "pad", "unk"):
        assert getattr(ours, f"{name}_token") == getattr(ref, f"{name}_token")
        assert getattr(ours, f"{name}_token_id") == getattr(ref, f"{name}_token_id")
    assert ours.all_special_tokens == ref.all_special_tokens
    assert sorted(ours.all_special_ids) == sorted(ref.all_special_ids)
    assert ours.get_vocab() == ref.get_vocab() and len(ours) == len(ref) and ours.vocab_size == ref.vocab_size
    ids = ours(TEXTS, PAIRS)["input_ids"]
    assert ours.batch_decode(ids) == ref.batch_decode(ids)
    assert ours.batch_decode(ids, skip_special_tokens=True) == ref.batch_decode(ids, skip_special_tokens=True)
    assert ours.batch_decode(torch.tensor(ids[:1])) == ref.batch_decode(torch.tensor(ids[:1]))


def test_add_tokens_as_transformers_and_saved(tmp_path, minilm_dir):
    ours = BertTokenizer.from_pretrained(minilm_dir)
    ref = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    new = ["bertforgery", "[NEW]", "the", "bertforgery"]
    assert ours.add_tokens(new) == ref.add_tokens(new) == 3  # "the" is in the vocabulary, and still counts
    assert ours.add_tokens(["<extra>"], special_tokens=True) == ref.add_tokens(["<extra>"], special_tokens=True)
    assert len(ours) == len(ref) and ours.vocab_size == ref.vocab_size and ours.get_vocab() == ref.get_vocab()
    text = "A bertforgery of [NEW] things <extra> here"
    assert ours(text)["input_ids"] == ref(text)["input_ids"]
    assert ours.decode(ours(text)["input_ids"]) == ref.decode(ref(text)["input_ids"])
    ours.save_pretrained(tmp_path / "ours")
    for folder in (tmp_path / "ours",):
        again = BertTokenizer.from_pretrained(folder)
        assert again.get_vocab() == ours.get_vocab() and again(text)["input_ids"] == ours(text)["input_ids"]
        assert again.decode(again(text)["input_ids"], skip_special_tokens=True) == \
            ours.decode(ours(text)["input_ids"], skip_special_tokens=True)  # <extra> still special
        assert transformers.AutoTokenizer.from_pretrained(folder)(text)["input_ids"] == ours(text)["input_ids"]
    ref.save_pretrained(tmp_path / "ref")  # a transformers 5 folder: tokenizer.json, no vocab.txt
    assert not (tmp_path / "ref" / "vocab.txt").exists()
    again = BertTokenizer.from_pretrained(tmp_path / "ref")
    assert again.get_vocab() == ref.get_vocab() and again(text)["input_ids"] == ref(text)["input_ids"]
