"""Feature extraction against the reference implementation (transformers' BertModel hidden states)."""

import argparse
import csv
import io
import json
import logging

import numpy as np
import pytest
import torch
import transformers

from bertforge.core.errors import BertforgeError
from bertforge.commands.features import add_features_arguments, read_texts, run_features
from bertforge.inference.features import FeatureExtractor, extract_features, write_features
from tests.conftest import require_shared

transformers.logging.set_verbosity_error()

WORDS_TEXT = "Héllo, wörld! It's naïve café-style (really)."  # 6 whitespace words, 17 pieces


@pytest.fixture(scope="module")
def model_dir():
    return require_shared("models", "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def extractor(model_dir):
    return FeatureExtractor(model_dir, device="cpu")


@pytest.fixture(scope="module")
def reference(model_dir):
    model = transformers.BertModel.from_pretrained(model_dir).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    return model, tokenizer


@pytest.fixture(scope="module")
def sst2():
    path = require_shared("data", "glue", "SST-2", "dev.tsv")
    with open(path, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return [r["sentence"] for r in rows[:50]]


@pytest.fixture(scope="module")
def sst2_reference(reference, sst2):
    return reference_states(reference, sst2)


@torch.no_grad()
def reference_states(reference, texts, pairs=None, **kw):
    """Hidden states, mask and tokens of the reference for a batch of texts."""
    model, tokenizer = reference
    enc = tokenizer(texts, pairs, padding=True, return_tensors="pt", **kw)
    out = model(**enc, output_hidden_states=True)
    tokens = [tokenizer.convert_ids_to_tokens(ids[m.bool()]) for ids, m in zip(enc["input_ids"], enc["attention_mask"])]
    return out.hidden_states, enc["attention_mask"].bool(), tokens


def test_token_level_last_four_concatenated_matches_reference(extractor, sst2, sst2_reference):
    features = extractor.extract(sst2, batch_size=16)
    assert features.level == "token" and features.dim == 4 * 384 and features.windowed == 0
    states, mask, tokens = sst2_reference
    expected = torch.cat([states[i] for i in (-1, -2, -3, -4)], -1)
    for i in range(len(sst2)):
        assert features.tokens[i] == tokens[i]
        got = features.vectors[i]
        assert got.dtype == np.float32 and got.shape == (int(mask[i].sum()), 4 * 384)
        np.testing.assert_allclose(got, expected[i][mask[i]].numpy(), atol=1e-4, rtol=0)


def test_sum_and_mean_combine_and_the_embedding_layer(extractor, reference, sst2):
    texts = sst2[:6]
    layers = (0, 3, -1)
    concat = extractor.extract(texts, layers=layers)
    summed = extractor.extract(texts, layers=layers, combine="sum")
    mean = extractor.extract(texts, layers=layers, combine="mean")
    states, mask, _ = reference_states(reference, texts)
    assert summed.dim == mean.dim == 384
    for i in range(len(texts)):
        parts = concat.vectors[i].reshape(-1, 3, 384)
        np.testing.assert_allclose(parts[:, 0], states[0][i][mask[i]].numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(summed.vectors[i], parts.sum(1), atol=1e-5, rtol=0)
        np.testing.assert_allclose(mean.vectors[i], parts.mean(1), atol=1e-5, rtol=0)


def test_sentence_level_mean_and_cls_pooling(extractor, sst2, sst2_reference):
    mean = extractor.extract(sst2, layers=(-1,), level="sentence", batch_size=16)
    cls = extractor.extract(sst2, layers=(-1,), level="sentence", pooling="cls")
    states, mask, _ = sst2_reference
    last = states[-1]
    m = mask[..., None].float()
    expected = (last * m).sum(1) / m.sum(1)
    assert mean.vectors.shape == (len(sst2), 384) and mean.tokens is None
    np.testing.assert_allclose(mean.vectors, expected.numpy(), atol=1e-4, rtol=0)
    np.testing.assert_allclose(cls.vectors, last[:, 0].numpy(), atol=1e-4, rtol=0)


def test_word_level_first_and_mean_pieces(extractor):
    tokens = extractor.extract([WORDS_TEXT], layers=(-1,))
    first = extractor.extract([WORDS_TEXT], layers=(-1,), level="word")
    mean = extractor.extract([WORDS_TEXT], layers=(-1,), level="word", word_vector="mean")
    assert first.tokens == mean.tokens == [WORDS_TEXT.split()]
    assert first.vectors[0].shape == mean.vectors[0].shape == (6, 384)
    pieces = tokens.tokens[0]
    assert pieces[:5] == ["[CLS]", "hello", ",", "world", "!"]  # lower-cased, accents stripped, punctuation split
    # Token rows of each word, found by hand: punctuation belongs to the whitespace word it was split from.
    groups = [[1, 2], [3, 4]]
    rest = list(range(5, len(pieces) - 1))
    k = 0
    for word in WORDS_TEXT.split()[2:]:
        text = word.lower().replace("ï", "i").replace("é", "e")
        group = []
        while "".join(pieces[t].removeprefix("##") for t in group) != text:
            group.append(rest[k])
            k += 1
        groups.append(group)
    assert k == len(rest)
    matrix = tokens.vectors[0]
    for w, group in enumerate(groups):
        np.testing.assert_allclose(first.vectors[0][w], matrix[group[0]], atol=1e-6)
        np.testing.assert_allclose(mean.vectors[0][w], matrix[group].mean(0), atol=1e-5)


def test_word_level_pairs_blank_lines_and_dropped_words(extractor, caplog):
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        result = extractor.extract([("Who's there?", "Ça va, merci."), "", "a \u200b b"], layers=(-1,), level="word")
    assert result.tokens == [["Who's", "there?", "Ça", "va,", "merci."], [], ["a", "\u200b", "b"]]
    assert [v.shape for v in result.vectors] == [(5, 384), (0, 384), (3, 384)]
    assert not result.vectors[2][1].any() and result.vectors[2][0].any()  # the zero-width space has no tokens
    assert "1 words had no tokens" in caplog.text


def test_pairs_match_reference_and_truncation_is_counted(extractor, reference, caplog):
    pairs = [("the cat sat on the mat .", "a dog barked ."), ("short", "one two three four five six seven eight")]
    result = extractor.extract(pairs, layers=(-2,))
    states, mask, tokens = reference_states(reference, [a for a, _ in pairs], [b for _, b in pairs])
    for i in range(len(pairs)):
        assert result.tokens[i] == tokens[i]
        np.testing.assert_allclose(result.vectors[i], states[-2][i][mask[i]].numpy(), atol=1e-4, rtol=0)
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        cut = extractor.extract(pairs, layers=(-1,), max_length=8)
    assert cut.truncated == 2 and "2 of 2 text pairs" in caplog.text
    assert [len(t) for t in cut.tokens] == [8, 8]
    assert cut.tokens[1] == ["[CLS]", "short", "[SEP]", "one", "two", "three", "four", "[SEP]"]


def test_long_text_windows_take_each_token_where_it_has_most_context(extractor, reference):
    text = " ".join(f"word{i} is number {i} ." for i in range(12))
    full = extractor.extract([text], layers=(-1,))
    n = len(full.tokens[0]) - 2
    max_length, stride = 16, 5
    room = max_length - 2
    result = extractor.extract([text], layers=(-1,), max_length=max_length, stride=stride)
    assert result.windowed == 1 and result.tokens == full.tokens and result.vectors[0].shape == (n + 2, 384)

    model, tokenizer = reference
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == n
    spans, start = [], 0
    while True:  # Google's doc spans
        spans.append((start, min(room, n - start)))
        if start + spans[-1][1] >= n:
            break
        start += stride
    with torch.no_grad():
        windows = [model(torch.tensor([[tokenizer.cls_token_id, *ids[s:s + size], tokenizer.sep_token_id]]))
                   .last_hidden_state[0].numpy() for s, size in spans]
    np.testing.assert_allclose(result.vectors[0][0], windows[0][0], atol=1e-4)  # [CLS] from the first window
    np.testing.assert_allclose(result.vectors[0][-1], windows[-1][-1], atol=1e-4)  # [SEP] from the last
    for j in range(n):
        scores = [min(j - s, s + size - 1 - j) + 0.01 * size if s <= j < s + size else -1 for s, size in spans]
        k = int(np.argmax(scores))
        np.testing.assert_allclose(result.vectors[0][1 + j], windows[k][1 + j - spans[k][0]], atol=1e-4)


def test_bf16_is_close(extractor, sst2):
    exact = extractor.extract(sst2[:4], layers=(-1,), level="sentence")
    fast = extractor.extract(sst2[:4], layers=(-1,), level="sentence", bf16=True)
    cosine = (exact.vectors * fast.vectors).sum(1) / np.linalg.norm(exact.vectors, axis=1) / np.linalg.norm(
        fast.vectors, axis=1)
    assert fast.vectors.dtype == np.float32 and cosine.min() > 0.99


def test_outputs_npy_npz_jsonl(extractor, tmp_path, sst2):
    texts = sst2[:3]
    sentence = extractor.extract(texts, layers=(-1, -2), level="sentence")
    np.testing.assert_array_equal(np.load(write_features(sentence, tmp_path / "s.npy")), sentence.vectors)
    with np.load(write_features(sentence, tmp_path / "s.npz")) as z:
        np.testing.assert_array_equal(z["features"], sentence.vectors)
    lines = (write_features(sentence, tmp_path / "s.jsonl")).read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert [(r["index"], r["text"]) for r in records] == list(enumerate(texts))
    np.testing.assert_allclose(records[1]["vector"], sentence.vectors[1], atol=1e-6)

    tokens = extractor.extract(texts, layers=(-1, -2))
    with np.load(write_features(tokens, tmp_path / "t.npz")) as z:  # no pickle needed
        assert z["level"] == "token" and z["layers"].tolist() == [-1, -2]
        for i in range(3):
            np.testing.assert_array_equal(z[f"features_{i}"], tokens.vectors[i])
            assert z[f"tokens_{i}"].tolist() == tokens.tokens[i]
    records = [json.loads(line) for line in write_features(tokens, tmp_path / "t.jsonl").read_text().splitlines()]
    feature = records[2]["features"][1]
    assert records[2]["linex_index"] == 2 and feature["token"] == tokens.tokens[2][1]
    assert [layer["index"] for layer in feature["layers"]] == [-1, -2]
    np.testing.assert_allclose(feature["layers"][1]["values"], tokens.vectors[2][1][384:], atol=1e-6)

    words = extractor.extract([WORDS_TEXT], layers=(-1, -2), combine="mean", level="word")
    with np.load(write_features(words, tmp_path / "w.npz")) as z:
        assert z["words_0"].tolist() == WORDS_TEXT.split() and z["features_0"].shape == (6, 384)
    [record] = [json.loads(line) for line in write_features(words, tmp_path / "w.jsonl").read_text().splitlines()]
    assert record["features"][0]["word"] == "Héllo,"
    assert record["features"][0]["layers"][0]["index"] == [-1, -2]

    with pytest.raises(BertforgeError, match=r"t\.npy: output must end with \.npz, \.jsonl"):
        write_features(tokens, tmp_path / "t.npy")
    assert not (tmp_path / "t.npy").exists()


def parse(argv):
    parser = argparse.ArgumentParser()
    add_features_arguments(parser)
    return parser.parse_args(argv)


def test_cli_on_a_file_and_stdin(model_dir, tmp_path, capsys, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("the first text .\nWho's there? ||| Me, you know.\n", encoding="utf-8")
    out = tmp_path / "f.npz"
    args = parse(["--model", str(model_dir), "--input", str(src), "--out", str(out), "--layers", "-1,-2",
                  "--level", "word", "--pair"])
    assert args.layers == "-1,-2"
    assert run_features(args) == 0
    summary = capsys.readouterr().out
    assert summary.count("\n") == 1 and "2 texts" in summary and "[words, 768]" in summary and str(out) in summary
    with np.load(out) as z:
        assert z["words_1"].tolist() == ["Who's", "there?", "Me,", "you", "know."]

    monkeypatch.setattr("sys.stdin", io.StringIO("one\ntwo three\n"))
    out = tmp_path / "s.npy"
    args = parse(["--model", str(model_dir), "--input", "-", "--out", str(out), "--layers=0", "--level",
                  "sentence", "--pooling", "cls"])
    assert run_features(args) == 0
    assert "[2, 384]" in capsys.readouterr().out and np.load(out).shape == (2, 384)


def test_read_texts_keeps_line_numbers_and_splits_pairs(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("  a ||| b \r\n\nno pair here\n", encoding="utf-8")
    assert read_texts(path) == ["a ||| b", "", "no pair here"]
    assert read_texts(path, pair=True) == [("a", "b"), ("", None), ("no pair here", None)]


def test_errors_are_one_line(model_dir, extractor, tmp_path):
    cases = [
        (lambda: extract_features(tmp_path / "nope", ["x"]), r"nope: no such model folder"),
        (lambda: extractor.extract(["x"], layers=(7,)), r"config\.json: layer 7 does not exist: the model has 6"),
        (lambda: extractor.extract(["x"], layers=(-8,)), r"layer -8 does not exist"),
        (lambda: extractor.extract(["x"], layers=()), r"no layers chosen"),
        (lambda: extractor.extract([]), r"empty input"),
        (lambda: extractor.extract("a text"), r"not a single string"),
        (lambda: extractor.extract(["x"], combine="max"), r"combine must be one of concat, sum, mean"),
        (lambda: extractor.extract(["x"], max_length=513), r"max_length must be between 3 and 512"),
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    cases += [
        (lambda: read_texts(empty), r"empty\.txt: no text \(empty input\)"),
        (lambda: read_texts(tmp_path / "missing.txt"), r"missing\.txt: file not found"),
        (lambda: run_features(parse(["--model", str(model_dir), "--input", str(empty), "--out",
                                     str(tmp_path / "x.npy")])), r"x\.npy: output must end with \.npz, \.jsonl"),
        (lambda: run_features(parse(["--model", str(model_dir), "--input", str(empty), "--out",
                                     str(tmp_path / "x.npz"), "--layers=-1,x"])), r"--layers: expected"),
    ]
    for call, message in cases:
        with pytest.raises(BertforgeError, match=message) as info:
            call()
        assert "\n" not in str(info.value)


def test_a_roberta_text_and_pair_are_laid_out_as_its_tokenizer_lays_them(tmp_path):
    """Features of another family read its tokenizer's layout, never BERT's: RoBERTa's <s> A </s> and
    <s> A </s></s> B </s> (its one segment), tokens and vectors equal to transformers' on the same encoding; a
    text longer than the window stitched from windows that keep <s> first and </s> last."""
    from tests.conftest import ROBERTA_TEXTS, roberta_folder

    folder = roberta_folder(tmp_path / "roberta", "RobertaModel")
    reference = (transformers.RobertaModel.from_pretrained(folder).eval(),
                 transformers.AutoTokenizer.from_pretrained(folder))
    extractor = FeatureExtractor(folder, device="cpu")
    texts, seconds = ROBERTA_TEXTS[:3], ROBERTA_TEXTS[3:6]
    for pairs in (None, seconds):
        ours = extractor.extract(texts if pairs is None else list(zip(texts, pairs)), layers=[-1])
        hidden, mask, tokens = reference_states(reference, texts, pairs)
        for i in range(len(texts)):
            assert ours.tokens[i] == tokens[i]
            assert tokens[i][0] == "<s>" and tokens[i][-1] == "</s>"
            np.testing.assert_allclose(ours.vectors[i], hidden[-1][i][mask[i].bool()].numpy(), atol=1e-4)
    assert tokens[0].count("</s>") == 3  # the pair's <s> A </s></s> B </s>
    long = " ".join(ROBERTA_TEXTS[:12])
    windowed = extractor.extract([long], layers=[-1], max_length=32, stride=8)
    tokenizer = reference[1]
    assert windowed.windowed == 1
    assert windowed.tokens[0] == tokenizer.convert_ids_to_tokens(tokenizer(long)["input_ids"])
