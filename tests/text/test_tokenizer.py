"""BertTokenizer against transformers' BertTokenizerFast on real data, plus errors, training and the CLI."""

import argparse
import copy
import json
from functools import cache

import numpy as np
import pytest
import torch

from bertforge.core.errors import BertforgeError
from bertforge.commands.tokenizer import SAMPLES, add_tokenizer_arguments, run_tokenizer
from bertforge.text.tokenizer import BertTokenizer, looks_uncased, read_vocab
from bertforge.text.wordpiece import train_vocab
from tests.conftest import require_shared

HARD_STRINGS = [
    "Héllo Wörld, naïve café résumé Ångström Øresund Straße İstanbul",
    "combining e\u0301 and a\u0308 marks",
    "東京は日本の首都です。 中文字符 한국어 カタカナ",
    "emoji 🤗👍🏽 family 👨‍👩‍👧 flags 🇫🇷 ✨",
    "tab\there\nnew\rline \x07bell \x1besc \x7fdel \x85nel",
    "nul\x00inside and\x00\x00twice",
    "bad \ufffd char \ufffd\ufffd",
    "zero\u200bwidth\u200cnon\u200djoiner \ufeffbom soft\u00adhyphen \u2060wj",
    "x" * 300,
    "y" * 100 + " " + "z" * 101,
    "",
    "   \t\n  \u3000\u00a0 ",
    "Привет мир! مرحبا بالعالم שלום नमस्ते ελληνικά ΣΊΣΥΦΟΣ",
    "«quoted» — dash… ‘single’ “double” ¿qué? ¡sí! 1,000.50€ 50% @user #tag",
    "https://example.com/path?q=1&x=y_z ~/.bashrc C++ a|b {c}",
    "don't can't it's O'Neill rock'n'roll",
    "The capital of France is [MASK] . [CLS] [SEP] [mask] [UNK]",
    "ﬁnancial ½ ² Ⅻ ℝ ｆｕｌｌｗｉｄｔｈ",
]
KEYS = ["input_ids", "token_type_ids", "attention_mask", "offset_mapping", "special_tokens_mask"]


# ---------------------------------------------------------------------------------------------- data and fixtures

@cache
def sst2_sentences() -> list[str]:
    lines = require_shared("data", "glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()
    column = lines[0].split("\t").index("sentence")
    return [line.split("\t")[column] for line in lines[1:]]


@cache
def conll_sentences() -> list[str]:
    sentences, words = [], []
    for line in require_shared("data", "conll2003", "test.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            if words:
                sentences.append(" ".join(words))
            words = []
        elif not line.startswith("-DOCSTART-"):
            words.append(line.split()[0])
    if words:
        sentences.append(" ".join(words))
    return sentences


@cache
def squad() -> tuple[list[str], list[str], list[str]]:
    """Contexts, and the questions with the context each one is about."""
    data = json.loads(require_shared("data", "squad", "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    contexts, questions, their_contexts = [], [], []
    for article in data:
        for paragraph in article["paragraphs"]:
            contexts.append(paragraph["context"])
            for qa in paragraph["qas"]:
                questions.append(qa["question"])
                their_contexts.append(paragraph["context"])
    return contexts, questions, their_contexts


def reference(vocab_file, lower: bool):
    """transformers' tokenizer from the vocab file alone.

    transformers 5 silently ignores BertTokenizerFast(vocab_file=...) (it builds a 5-token vocab), so the
    vocabulary is passed as a dict read by transformers' own load_vocab.
    """
    transformers = pytest.importorskip("transformers")
    from transformers.models.bert.tokenization_bert import load_vocab

    return transformers.BertTokenizerFast(vocab=load_vocab(str(vocab_file)), do_lower_case=lower)


@pytest.fixture(scope="module")
def uncased():
    vocab_file = require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")
    return BertTokenizer.from_pretrained(vocab_file), reference(vocab_file, lower=True)


@pytest.fixture(scope="module")
def cased(tmp_path_factory):
    """No cased vocab is shared: the uncased one plus capitalised words, some upper-case pieces and accented words."""
    tokens = read_vocab(require_shared("models", "all-MiniLM-L6-v2", "vocab.txt"))
    words = [t for t in tokens if t.isalpha() and t.isascii()]
    extra = [w.capitalize() for w in words] + [w.upper() for w in words[:2000]]
    extra += ["##" + w.capitalize() for w in words[:500]]
    extra += ["Héllo", "Wörld", "café", "##é", "Straße", "İstanbul"]
    extra = [t for t in dict.fromkeys(extra) if t not in tokens]
    vocab_file = tmp_path_factory.mktemp("cased") / "vocab.txt"
    vocab_file.write_text("".join(t + "\n" for t in [*tokens, *extra]), encoding="utf-8")
    tokenizer = BertTokenizer.from_pretrained(vocab_file)  # no tokenizer_config.json: cased is guessed
    assert tokenizer.do_lower_case is False
    return tokenizer, reference(vocab_file, lower=False)


@pytest.fixture(params=["uncased", "cased"])
def both(request):
    return request.getfixturevalue(request.param)


def assert_same(ours, ref, texts, pairs=None, **kw):
    """Same ids, segments, masks, offsets and word ids as transformers, reporting the first text that differs."""
    kw |= dict(return_offsets_mapping=True, return_special_tokens_mask=True)
    got, want = ours(texts, pairs, **kw), ref(texts, pairs, **kw)
    n = len(texts)
    for key in KEYS:
        bad = [i for i in range(n) if got[key][i] != want[key][i]]
        assert not bad, f"{key} differs on {len(bad)} of {n}, first {texts[bad[0]]!r}"
    bad = [i for i in range(n) if got.word_ids(i) != want.word_ids(i)]
    assert not bad, f"word_ids differ on {len(bad)} of {n}, first {texts[bad[0]]!r}"


# -------------------------------------------------------------------------------- parity with transformers, real data

@pytest.mark.slow
def test_sst2_and_conll_match_transformers(both):
    ours, ref = both
    assert_same(ours, ref, sst2_sentences())
    assert_same(ours, ref, conll_sentences())


@pytest.mark.slow
def test_squad_contexts_and_pairs_match_transformers(uncased):
    ours, ref = uncased
    contexts, questions, their_contexts = squad()
    assert_same(ours, ref, contexts)
    assert_same(ours, ref, questions, their_contexts, truncation="only_second", max_length=384)


@pytest.mark.slow
def test_squad_cased_matches_transformers(cased):
    """Every context, but only the first question of each (transformers takes ~10 s for all 10,570 pairs)."""
    ours, ref = cased
    contexts, questions, their_contexts = squad()
    assert_same(ours, ref, contexts)
    firsts = {c: q for q, c in zip(questions[::-1], their_contexts[::-1])}
    assert_same(ours, ref, list(firsts.values()), list(firsts), truncation="only_second", max_length=384)


def test_hard_strings_match_transformers(both):
    ours, ref = both
    assert_same(ours, ref, HARD_STRINGS)
    assert_same(ours, ref, HARD_STRINGS, HARD_STRINGS[::-1])
    for text in HARD_STRINGS:
        got, want = ours(text, return_offsets_mapping=True), ref(text, return_offsets_mapping=True)
        assert got["input_ids"] == want["input_ids"], text
        assert got["offset_mapping"] == want["offset_mapping"], text
        assert ours.tokenize(text) == ref.tokenize(text), text


@pytest.mark.parametrize("max_length", [2, 3, 4, 8, 24])
@pytest.mark.parametrize("truncation", [True, "longest_first"])
def test_batch_padding_and_truncation_match_transformers(uncased, truncation, max_length):
    ours, ref = uncased
    firsts = sst2_sentences()[:40] + HARD_STRINGS
    seconds = sst2_sentences()[40:80][::-1] + HARD_STRINGS[::-1]
    for padding in [True, "longest", "max_length"]:
        kw = dict(padding=padding, truncation=truncation, max_length=max_length)
        assert_same(ours, ref, firsts, **kw)
        if max_length >= 3:  # a pair needs room for its three special tokens
            assert_same(ours, ref, firsts, seconds, **kw)
            assert_same(ours, ref, seconds, firsts, **kw)


def test_only_first_only_second_and_tensors_match_transformers(uncased):
    ours, ref = uncased
    long_texts = sst2_sentences()[:50]
    short_texts = ["a short one", "two"] * 25
    assert_same(ours, ref, long_texts, short_texts, truncation="only_first", max_length=12, padding=True)
    assert_same(ours, ref, short_texts, long_texts, truncation="only_second", max_length=12, padding=True)
    kw = dict(padding="max_length", truncation=True, max_length=16, return_special_tokens_mask=True)
    for tensors in ["pt", "np"]:
        got = ours(long_texts, short_texts, return_tensors=tensors, **kw)
        want = ref(long_texts, short_texts, return_tensors=tensors, **kw)
        assert set(got) == set(want)
        for key in got:
            assert got[key].dtype == want[key].dtype and got[key].shape == (50, 16)
            assert (got[key] == want[key]).all(), key
    without = dict(add_special_tokens=False, return_special_tokens_mask=True)
    assert ours(long_texts, short_texts, **without) == ref(long_texts, short_texts, **without).data


def test_single_text_gives_flat_lists_and_batch_gives_tensors(uncased):
    ours, _ = uncased
    enc = ours("Hello world", return_special_tokens_mask=True)
    assert enc["input_ids"] == [101, 7592, 2088, 102]
    assert enc["special_tokens_mask"] == [1, 0, 0, 1]
    assert enc.word_ids() == [None, 0, 1, None]
    pt = ours("Hello world", "again", return_tensors="pt")
    assert pt["input_ids"].dtype == torch.long and pt["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1]]
    assert ours(["a", "b c"], return_tensors="np", padding=True)["attention_mask"].dtype == np.int64
    assert ours.encode("Hello world") == [101, 7592, 2088, 102]
    assert ours.convert_ids_to_tokens(ours.encode("Hello world")) == ["[CLS]", "hello", "world", "[SEP]"]
    assert ours.convert_tokens_to_ids(["hello", "notaword"]) == [7592, 100]


def test_vocab_and_special_ids(uncased):
    ours, _ = uncased
    assert len(ours) == ours.vocab_size == len(ours.vocab) == 30522
    assert (ours.pad_token_id, ours.unk_token_id, ours.cls_token_id, ours.sep_token_id, ours.mask_token_id) == (
        0, 100, 101, 102, 103)
    assert ours.model_max_length == 512
    # The released uncased vocab holds "ℝ": upper case, but unchanged by lower-casing, so it still looks uncased.
    assert looks_uncased(ours.vocab)


# ------------------------------------------------------------------------------------------------------- decoding

def test_decode_round_trips(both):
    ours, ref = both
    texts = sst2_sentences() + conll_sentences()[:500] + HARD_STRINGS
    all_ids = ours(texts)["input_ids"]
    for ids in all_ids:
        assert ours.decode(ids) == ref.decode(ids)
        assert ours.decode(ids, skip_special_tokens=True) == ref.decode(ids, skip_special_tokens=True)
    # decode drops [UNK] with the other special tokens, so only texts without one come back whole.
    known = [ids for ids in all_ids if ours.unk_token_id not in ids]
    assert len(known) > 0.9 * len(all_ids)
    for ids in known:
        assert ours.encode(ours.decode(ids, skip_special_tokens=True)) == ids, ours.decode(ids)


def test_decode_examples(uncased, cased):
    assert uncased[0].decode(uncased[0].encode("Hello, World! The naïve café."),
                             skip_special_tokens=True) == "hello, world! the naive cafe."
    assert cased[0].decode(cased[0].encode("Hello, World! Paris"), skip_special_tokens=True) == "Hello, World! Paris"
    assert uncased[0].decode(uncased[0].encode("hi"), skip_special_tokens=False) == "[CLS] hi [SEP]"


# --------------------------------------------------------------------------------------------------------- errors

def one_line_error(call, *words):
    with pytest.raises(BertforgeError) as e:
        call()
    message = str(e.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message
    return message


def test_config_contradiction_is_refused(minilm_dir, tmp_path):
    one_line_error(lambda: BertTokenizer.from_pretrained(minilm_dir, do_lower_case=False),
                   "tokenizer_config.json", "trained uncased", "contradicts")
    assert BertTokenizer.from_pretrained(minilm_dir, do_lower_case=True).do_lower_case
    (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nHello\n", encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}', encoding="utf-8")
    one_line_error(lambda: BertTokenizer.from_pretrained(tmp_path, do_lower_case=True), "trained cased")
    assert BertTokenizer.from_pretrained(tmp_path / "vocab.txt").do_lower_case is False


def test_bad_vocab_files(tmp_path):
    one_line_error(lambda: BertTokenizer.from_pretrained(tmp_path), str(tmp_path / "vocab.txt"), "not found")
    one_line_error(lambda: read_vocab(tmp_path / "missing.txt"), "missing.txt", "not found")
    no_mask = tmp_path / "no_mask.txt"
    no_mask.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", encoding="utf-8")
    one_line_error(lambda: read_vocab(no_mask), str(no_mask), "[MASK]")
    duplicated = tmp_path / "duplicated.txt"
    duplicated.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\nof\nthe\n", encoding="utf-8")
    one_line_error(lambda: read_vocab(duplicated), f"{duplicated}:8", "'the'", "line 6")
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\ncafé\n".encode("latin-1"))
    one_line_error(lambda: read_vocab(latin1), str(latin1), "byte 34")


def wordpiece_json(folder, change):
    """A folder holding a small WordPiece tokenizer as transformers 5 saves it (tokenizer.json, no vocab.txt), with
    `change` made to its tokenizer.json."""
    vocab = {t: i for i, t in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s"])}
    BertTokenizer(vocab, do_lower_case=True).save_pretrained(folder)
    (folder / "vocab.txt").unlink()
    pipeline = json.loads((folder / "tokenizer.json").read_text())
    change(pipeline)
    (folder / "tokenizer.json").write_text(json.dumps(pipeline))
    return folder


@pytest.mark.parametrize("change, words", [
    (lambda p: p["model"].update(vocab=list(p["model"]["vocab"])),
     "the WordPiece model's vocab is list, not an object of tokens to ids"),
    (lambda p: p["model"]["vocab"].update(cats=4), "tokens '[MASK]' and 'cats' both have id 4"),
    (lambda p: p["model"]["vocab"].update(cat=99), "the WordPiece vocabulary's 9 ids skip 6; they must be 0 to 8"),
    (lambda p: p["added_tokens"].append({"id": -5, "content": "[NEW]"}),
     "added token '[NEW]' has id -5, not a whole number from 0"),
])
def test_a_wordpiece_tokenizer_json_is_checked(tmp_path, change, words):
    """Its vocabulary's ids one token's each, 0 to n-1 as vocab.txt's lines; an added token's id a token id (one
    of -5 was dropped without a word)."""
    folder = wordpiece_json(tmp_path, change)
    message = one_line_error(lambda: BertTokenizer.from_pretrained(folder), words)
    assert message.startswith(str(folder / "tokenizer.json"))


def test_a_wordpiece_tokenizer_jsons_padding_and_truncation_are_not_applied(tmp_path):
    transformers = pytest.importorskip("transformers")

    folder = wordpiece_json(tmp_path, lambda p: p.update(truncation={"direction": "Right", "max_length": 2,
                                                                     "strategy": "LongestFirst", "stride": 0}))
    text = "the cats sat the cat"
    ours = BertTokenizer.from_pretrained(folder)(text)["input_ids"]
    assert ours == transformers.PreTrainedTokenizerFast.from_pretrained(folder)(text)["input_ids"] and len(ours) == 8


def test_non_string_text_is_refused(uncased):
    ours, _ = uncased
    one_line_error(lambda: ours(["a", "b", "c", 4]), "text[3] is int, expected str")
    one_line_error(lambda: ours(None), "text is NoneType")
    one_line_error(lambda: ours(7), "text is int")
    one_line_error(lambda: ours("a", 3), "text_pair is int")
    one_line_error(lambda: ours(["a", "b"], ["c", None]), "text_pair[1] is NoneType")
    one_line_error(lambda: ours(["a", "b"], ["c"]), "text has 2 items but text_pair has 1")
    one_line_error(lambda: ours.tokenize(["a"]), "text is list, expected str")
    one_line_error(lambda: ours.encode(b"bytes"), "text is bytes")
    one_line_error(lambda: ours("a", padding="yes"), "padding")
    one_line_error(lambda: ours("a", truncation="only_third"), "truncation")
    one_line_error(lambda: ours(["a", "b c"], return_tensors="pt"), "padding=True")
    one_line_error(lambda: ours("a b c d", "e", truncation="only_second", max_length=4), "only_second")
    one_line_error(lambda: ours.convert_ids_to_tokens([5, 10**6]), "1000000", "outside the vocabulary")


# ------------------------------------------------------------------------------------------- training and saving

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 30,522-piece uncased vocab from the 13 Gutenberg books and the inaugural addresses (6.7 MB, ~3 s).

    Two of those files are ISO-8859-1 and the rest ASCII, so latin-1 reads them all.
    """
    corpus = require_shared("data", "corpus")
    out_dir = tmp_path_factory.mktemp("trained")
    return train_vocab([corpus / "gutenberg", corpus / "inaugural"], out_dir=out_dir, encoding="latin-1"), out_dir


def test_train_vocab(trained):
    tokenizer, out_dir = trained
    assert len(tokenizer) == 30522 and tokenizer.do_lower_case
    assert [tokenizer.convert_ids_to_tokens(i) for i in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for word in ["the", "said", "king", "The", "KING"]:
        assert tokenizer.tokenize(word) == [word.lower()]
    for rare in ["xylophonists", "photosynthesis", "Brunetière"]:
        pieces = tokenizer.tokenize(rare)
        assert len(pieces) > 1 and all(p.startswith("##") for p in pieces[1:]), pieces
        assert "".join(p.removeprefix("##") for p in pieces) == rare.lower().replace("è", "e")
    assert {p.name for p in out_dir.iterdir()} >= {"vocab.txt", "tokenizer.json", "tokenizer_config.json"}


def test_train_vocab_reports_undecodable_file_by_name_and_offset():
    ball = require_shared("data", "corpus", "gutenberg", "chesterton-ball.txt")  # ISO-8859-1 ("Brunetière")
    one_line_error(lambda: train_vocab([ball], vocab_size=100), f"{ball}:4631: byte 227337 (0xe8) is not valid utf-8",
                   "--encoding")
    one_line_error(lambda: train_vocab([ball.parent / "nope"]), "nope", "no such file")


@pytest.mark.parametrize("which", ["trained", "cased"])
def test_save_then_load_round_trips_and_transformers_agrees(which, request, tmp_path):
    transformers = pytest.importorskip("transformers")
    tokenizer = request.getfixturevalue(which)[0]
    tokenizer.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "BertTokenizer" and config["do_lower_case"] == tokenizer.do_lower_case
    assert (tmp_path / "special_tokens_map.json").is_file()

    loaded = BertTokenizer.from_pretrained(tmp_path)
    assert loaded.vocab == tokenizer.vocab and loaded.do_lower_case == tokenizer.do_lower_case
    assert loaded.model_max_length == tokenizer.model_max_length
    texts = sst2_sentences()[:200] + HARD_STRINGS
    assert loaded(texts, return_offsets_mapping=True) == tokenizer(texts, return_offsets_mapping=True)

    hf = transformers.BertTokenizerFast.from_pretrained(tmp_path)
    assert hf.do_lower_case == tokenizer.do_lower_case and len(hf) == len(tokenizer)
    assert_same(tokenizer, hf, texts)
    assert_same(tokenizer, hf, texts, texts[::-1], truncation=True, max_length=20, padding=True)


# ------------------------------------------------------------------------------------------------------------ CLI

def parse(*argv):
    parser = argparse.ArgumentParser()
    add_tokenizer_arguments(parser)
    return parser.parse_args(argv)


def test_cli_encode(minilm_dir, capsys):
    assert run_tokenizer(parse("encode", "--vocab", str(minilm_dir), "Hello, Paris!", "Bonjour")) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["#", "token", "id", "segment", "offsets", "text"]
    assert rows[1] == ["0", "[CLS]", "101", "0", "-"]
    assert rows[2] == ["1", "hello", "7592", "0", "0:5", "'Hello'"]
    assert rows[-2][1:] == ["##r", "2099", "1", "6:7", "'r'"]
    assert parse("encode", "--vocab", "v", "--cased", "x").do_lower_case is False
    assert parse("encode", "--vocab", "v", "x").do_lower_case is None
    with pytest.raises(BertforgeError, match="contradicts"):
        run_tokenizer(parse("encode", "--vocab", str(minilm_dir), "--cased", "x"))


def test_cli_train(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("The king said that the queen said nothing.\n" * 50, encoding="utf-8")
    (corpus / "b.text").write_text("Kings and queens, said the quick brown fox.\n" * 50, encoding="utf-8")
    (corpus / "NOTES").write_text("Zebras yodel\n" * 50, encoding="utf-8")  # no text suffix: not read
    (corpus / "skip.json").write_text("{not text}", encoding="utf-8")
    out = tmp_path / "vocab"
    args = parse("train", "--files", str(corpus), "--vocab-size", "120", "--out", str(out), "--cased")
    assert run_tokenizer(args) == 0
    printed = capsys.readouterr().out
    tokenizer = BertTokenizer.from_pretrained(out)
    assert f"trained a {tokenizer.vocab_size}-token cased vocabulary" in printed
    # the samples are printed as the saved vocabulary tokenizes them
    assert f"-> {' '.join(tokenizer.tokenize(SAMPLES[0]))}" in printed
    assert tokenizer.do_lower_case is False and {"The", "king", "queen", "brown", "fox"} <= set(tokenizer.vocab)
    assert not {"{", "Z", "y"} & set(tokenizer.vocab)  # characters of the files that are not read


def test_cli_train_encoding_fallbacks_and_progress(tmp_path, capsys):
    corpus = tmp_path / "speech.txt"
    lines = [("\u201cWe the people\u201d said caf\u00e9.\n", "utf-8"),
             ("It\u2019s \u20ac5, said the people.\n", "cp1252")]
    corpus.write_bytes(b"".join(line.encode(encoding) for line, encoding in lines * 20))
    argv = ["train", "--input", str(corpus), "--vocab-size", "80", "--out", str(tmp_path / "vocab")]
    with pytest.raises(BertforgeError, match=r"speech\.txt:2: byte \d+ \(0x92\) is not valid utf-8; pass --encoding"):
        run_tokenizer(parse(*argv))
    capsys.readouterr()
    assert run_tokenizer(parse(*argv, "--encoding", "utf-8,cp1252")) == 0
    bars = capsys.readouterr().err
    assert all(stage in bars for stage in ("read", "words", "merges")) and "it/s" not in bars  # with their units
    vocab = BertTokenizer.from_pretrained(tmp_path / "vocab").vocab
    assert {"\u201c", "\u2019", "\u20ac", "people"} <= set(vocab)
    assert run_tokenizer(parse(*argv, "--encoding", "utf-8,cp1252", "--no-progress")) == 0
    assert capsys.readouterr().err == ""



# --------------------------------------------------------------- transformers' tools: constructor, pad, collators
FEATURE_TEXTS = ["the film was good", "it was not a good film, it was bad", "bad", "the good, the bad and it"]


def both_tokenizers(folder):
    """bertforge's and transformers' tokenizer of one folder."""
    import transformers

    return BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)


def assert_same_batch(ours, theirs):
    assert ours.keys() == theirs.keys()
    for key in theirs:
        mine, reference = ours[key], theirs[key]
        if isinstance(reference, torch.Tensor):
            assert mine.dtype == reference.dtype and torch.equal(mine, reference), key
        elif isinstance(reference, np.ndarray):
            assert mine.dtype == reference.dtype and np.array_equal(mine, reference), key
        else:
            assert mine == reference, key


def test_constructor_takes_transformers_arguments(hub_bert, tmp_path):
    import transformers

    folder_tokenizer = BertTokenizer.from_pretrained(hub_bert)
    folder_tokenizer.save_pretrained(tmp_path)
    vocab_file = tmp_path / "vocab.txt"
    reference = transformers.BertTokenizer(vocab=str(vocab_file))
    texts = ["The FILM was Gôod!", "it was not bad"]
    for tokenizer in (BertTokenizer(vocab=vocab_file), BertTokenizer(vocab=str(vocab_file)),
                      BertTokenizer(vocab_file=vocab_file), BertTokenizer(folder_tokenizer.vocab),
                      BertTokenizer(vocab=folder_tokenizer.vocab, do_lower_case=True, unk_token="[UNK]",
                                    tokenize_chinese_chars=True, strip_accents=None)):
        assert tokenizer(texts) == dict(reference(texts)) == folder_tokenizer(texts)
    cased = BertTokenizer(vocab=vocab_file, do_lower_case=False)
    assert cased.tokenize("The") == transformers.BertTokenizer(vocab=str(vocab_file), do_lower_case=False).tokenize(
        "The") == ["[UNK]"]


def test_constructor_refusals(tmp_path, hub_bert):
    vocab = BertTokenizer.from_pretrained(hub_bert).vocab
    for kwargs, message in (({}, "takes a vocabulary"), ({"vocab": vocab, "vocab_file": "v.txt"}, "one of them"),
                            ({"vocab_file": tmp_path / "none.txt"}, "none.txt: vocabulary file not found"),
                            ({"vocab": {"a": 0}}, "lacks the special tokens"),
                            ({"vocab": vocab, "unk_token": "<unk>"}, "unk_token='<unk>'"),
                            ({"vocab": vocab, "strip_accents": False}, "strip_accents=False is not supported"),
                            ({"vocab": vocab, "tokenize_chinese_chars": False}, "tokenize_chinese_chars=False")):
        with pytest.raises(BertforgeError, match=message):
            BertTokenizer(**kwargs)
    with pytest.raises(TypeError, match="never_split"):
        BertTokenizer(vocab, never_split=["x"])


def features(tokenizer, **kwargs):
    """Rows of a tokenized `datasets.Dataset`: the encoding of each text, with a label."""
    return [{**tokenizer(text, **kwargs), "label": i % 2} for i, text in enumerate(FEATURE_TEXTS)]


@pytest.mark.parametrize("options", [
    {}, {"padding": "longest"}, {"padding": "max_length", "max_length": 24}, {"pad_to_multiple_of": 8},
    {"padding": "max_length", "max_length": 13, "pad_to_multiple_of": 4}, {"return_attention_mask": False},
    {"padding": False}])
@pytest.mark.parametrize("return_tensors", [None, "np", "pt"])
def test_pad_as_transformers(hub_bert, options, return_tensors):
    ours, theirs = both_tokenizers(hub_bert)
    # an attention mask given is padded whatever return_attention_mask says (transformers leaves it unpadded)
    mask = {"return_attention_mask": options.get("return_attention_mask") is not False}
    rows = features(ours, **mask)
    assert rows == [{**row} for row in features(theirs, **mask)]
    batch = {key: [row[key] for row in rows] for key in rows[0]}
    tensors = not options.get("padding", True) and return_tensors
    one = {k: v for k, v in rows[1].items() if k != "label"}  # transformers makes no tensor of one label
    for given in (rows, batch, one, {k: v for k, v in one.items() if k != "attention_mask"}):
        if tensors and given in (rows, batch):
            with pytest.raises(BertforgeError, match="input_ids has rows of different lengths"):
                ours.pad(given, return_tensors=return_tensors, **options)
            continue
        padded = ours.pad(given, return_tensors=return_tensors, **options)
        assert rows == features(ours, **mask)  # the features given are left as they were (transformers pads one
        # in place)
        assert_same_batch(padded, theirs.pad(copy.deepcopy(given), return_tensors=return_tensors, **options))


def test_pad_keeps_the_kind_of_tensors_given(hub_bert):
    ours, theirs = both_tokenizers(hub_bert)
    for kind in ("pt", "np"):
        given = ours(FEATURE_TEXTS[:2], padding=True, return_tensors=kind)
        for return_tensors in (None, "pt", "np"):
            options = {"padding": "max_length", "max_length": 16, "return_tensors": return_tensors}
            assert_same_batch(ours.pad(dict(given), **options), theirs.pad(dict(given), **options))
        rows = [{key: value[i] for key, value in given.items()} for i in range(2)]  # a list of tensors per key
        assert_same_batch(ours.pad(rows), theirs.pad(rows))


def test_pad_refusals_and_what_a_padded_encoding_lacks(hub_bert):
    tokenizer = BertTokenizer.from_pretrained(hub_bert)
    rows = features(tokenizer)
    for options, message in (({"padding_side": "left"}, "padding_side must be one of"),
                             ({"padding": "longer"}, "padding must be one of"),
                             ({"return_tensors": "tf"}, "return_tensors must be one of")):
        with pytest.raises(BertforgeError, match=message):
            tokenizer.pad(rows, **options)
    with pytest.raises(BertforgeError, match="pad takes encoded inputs with input_ids"):
        tokenizer.pad([{"text": "a"}])
    with pytest.raises(BertforgeError, match="has no word ids"):
        tokenizer.pad(rows).word_ids(0)
    assert (tokenizer.padding_side, tokenizer.model_input_names) == ("right", ["input_ids", "token_type_ids",
                                                                              "attention_mask"])


def test_transformers_collators_take_the_tokenizer(hub_bert):
    from transformers import DataCollatorForTokenClassification, DataCollatorWithPadding

    ours, theirs = both_tokenizers(hub_bert)
    for options in ({}, {"pad_to_multiple_of": 8}, {"padding": "max_length", "max_length": 20}):
        assert_same_batch(DataCollatorWithPadding(ours, **options)(features(ours)),
                          DataCollatorWithPadding(theirs, **options)(features(theirs)))
    words = [text.replace(",", " ,").split() for text in FEATURE_TEXTS]
    rows = []
    for text in words:
        row = dict(ours(text, is_split_into_words=True))
        rows.append({**row, "labels": [-100 if w is None else w % 3 for w in ours(text, is_split_into_words=True)
                                                                                .word_ids()]})
    for options in ({}, {"pad_to_multiple_of": 8}):
        assert_same_batch(DataCollatorForTokenClassification(ours, **options)([dict(r) for r in rows]),
                          DataCollatorForTokenClassification(theirs, **options)([dict(r) for r in rows]))
