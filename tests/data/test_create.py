import argparse
import hashlib
import json

import numpy as np
import pytest
import torch

from bertforge.data import check_vocab, create_pretraining_data, load_pretraining_data, vocab_sha256
from bertforge.commands.data import add_data_create_arguments, run_data_create
from bertforge.core.errors import BertforgeError
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import require_shared

STORY = ("The old lighthouse stood on the rocks above the harbour. Every night its keeper climbed the stairs. "
         "He lit the great lamp and watched the ships. Storms came often in the winter months. "
         "One evening a small boat appeared in the fog. The keeper rang the bell again and again. ")


@pytest.fixture
def corpus(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(6):
        (folder / f"story{i}.txt").write_text(f"Chapter {i}.\n\n" + STORY * (i + 2) + "\n", encoding="utf-8")
    (folder / "empty.txt").write_text("")
    (folder / "blank.txt").write_text("\n  \n\n")
    # Google's format: the second document has a single sentence, the third a sentence longer than 128 tokens.
    long_sentence = "It went on and on, " * 60 + "and then it stopped."
    # Special tokens typed in text are ordinary text, as for Google's tokenizer.
    (folder / "google.txt").write_text("First document, first sentence.\nIt writes [SEP] and [MASK].\nAnd a third.\n\n"
                                       "A lonely one-sentence document.\n\n" + long_sentence + "\nShort end.\n")
    return folder


def make(corpus, tokenizer, out, **kw):
    kw = {"max_seq_length": 32, "max_predictions": 5, "dupe_factor": 3, "seed": 7, **kw}
    return create_pretraining_data([corpus], tokenizer, out, **kw)


def test_end_to_end_files_and_reader(corpus, tokenizer, tmp_path):
    out = tmp_path / "out"
    stats = make(corpus, tokenizer, out, eval_docs=2)
    c = stats["corpus"]
    assert (c["files"], c["empty_files"], c["formats"]) == (9, 2, {"lines": 1, "raw": 6})
    assert c["documents"] == 9 and c["eval_documents"] == 2  # 6 stories + 3 documents in google.txt
    index = json.loads((out / "index.json").read_text())
    vocab_file = require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")
    assert index["vocab_sha256"] == hashlib.sha256(vocab_file.read_bytes()).hexdigest()
    assert (index["vocab_size"], index["do_lower_case"], index["max_seq_length"], index["seed"]) == (30522, True, 32, 7)
    assert index["masked"] and index["max_predictions"] == 5 and index["masked_lm_prob"] == 0.15
    assert sum(s["instances"] for s in index["shards"]) == index["instances"] == stats["train"]["instances"]
    assert (out / "vocab.txt").read_bytes() == vocab_file.read_bytes()  # the data folder carries its vocabulary

    train, held_out = load_pretraining_data(out), load_pretraining_data(out, "eval")
    assert len(train) == stats["train"]["instances"] and len(held_out) == stats["eval"]["instances"] > 0
    assert held_out.index["dupe_factor"] == 1
    b = train.batch(np.arange(len(train)))
    ids, types, attention = b["input_ids"], b["token_type_ids"], b["attention_mask"]
    positions, labels = b["mlm_positions"], b["mlm_labels"]
    lengths = attention.sum(1)
    assert ids.shape[1] == int(lengths.max()) <= 32 and positions.shape == labels.shape == (len(train), 5)
    assert (ids[:, 0] == tokenizer.cls_token_id).all()
    for row, n, t, s in zip(ids, lengths, types, b["special_tokens_mask"]):
        seps = (row[:n] == tokenizer.sep_token_id).nonzero().flatten().tolist()
        assert len(seps) == 2 and seps[1] == n - 1  # [CLS] A [SEP] B [SEP]: no [SEP] inside the text
        assert t[:seps[0] + 1].eq(0).all() and t[seps[0] + 1:n].eq(1).all() and t[n:].eq(0).all()
        assert (row[n:] == tokenizer.pad_token_id).all()
        assert s.nonzero().flatten().tolist() == [0, seps[0]] + list(range(n - 1, len(row)))
    valid = labels != -100
    expected = torch.clamp(torch.round(lengths * 0.15), 1, 5)  # round half to even, as Python 3
    assert (valid.sum(1) == expected).all()
    assert not b["special_tokens_mask"].gather(1, positions)[valid].any()
    assert (positions[~valid] == 0).all()
    one = train[3]
    assert one["input_ids"].shape == (int(lengths[3]),) and one["next_sentence_label"].shape == ()
    assert torch.equal(one["input_ids"], ids[3, :lengths[3]])


def test_statistics_on_real_corpus(tokenizer, tmp_path):
    corpus = require_shared("data", "corpus")
    out = tmp_path / "out"
    stats = create_pretraining_data([corpus / "state_union", corpus / "inaugural"], tokenizer, out, dupe_factor=3,
                                    encoding="utf-8,latin-1", seed=1)
    s = stats["train"]
    assert stats["corpus"]["documents"] == 120
    assert abs(s["random_next_share_of_coin_flips"] - 0.5) < 0.01
    assert abs(s["short_target_share_of_documents"] - 0.1) < 0.03
    assert abs(s["mask_token_share"] - 0.8) < 0.01
    assert abs(s["random_token_share"] - 0.1) < 0.01 and abs(s["kept_share"] - 0.1) < 0.01
    data = load_pretraining_data(out)
    b = data.batch(np.arange(len(data)))
    lengths, masked = b["attention_mask"].sum(1), (b["mlm_labels"] != -100).sum(1)
    assert torch.equal(masked, torch.clamp(torch.round(lengths * 0.15), 1, 20))  # Google's count, row by row
    full = lengths == 128  # 19 of 125 non-special tokens: 15.2%
    assert full.float().mean() > 0.5
    assert abs(masked[full].sum() / (lengths[full] - 3).sum() - 0.15) < 0.005
    assert abs(s["masked_share_of_non_special"] - masked.sum() / (lengths - 3).sum()) < 1e-9


def test_deterministic(corpus, tokenizer, tmp_path):
    for name, seed in [("a", 7), ("b", 7), ("c", 8)]:
        make(corpus, tokenizer, tmp_path / name, seed=seed, eval_docs=1, whole_word_mask=True)
    files = sorted(p.name for p in (tmp_path / "a").rglob("*.npy"))
    assert files and files == sorted(p.name for p in (tmp_path / "b").rglob("*.npy"))
    for sub in ["", "eval/"]:
        for f in (tmp_path / "a" / sub).glob("*.npy"):
            assert f.read_bytes() == (tmp_path / "b" / sub / f.name).read_bytes()
        assert (tmp_path / "a" / sub / "index.json").read_text() == (tmp_path / "b" / sub / "index.json").read_text()
    first = "shard-00000.tokens.npy"
    assert (tmp_path / "a" / first).read_bytes() != (tmp_path / "c" / first).read_bytes()


def test_unmasked_data_and_dynamic_masking(corpus, tokenizer, tmp_path):
    make(corpus, tokenizer, tmp_path / "out", mask=False, whole_word_mask=True)
    data = load_pretraining_data(tmp_path / "out")
    assert not data.static_masked and not list((tmp_path / "out").glob("*.mlm_*.npy"))
    plain = data.batch([0, 1, 2])
    assert "mlm_positions" not in plain and (plain["input_ids"] != tokenizer.mask_token_id).all()
    m1 = data.batch([0, 1, 2], rng=np.random.default_rng(0), pad_to=40)
    m2 = data.batch([0, 1, 2], rng=np.random.default_rng(0), pad_to=40)
    assert m1["input_ids"].shape == (3, 40) and torch.equal(m1["input_ids"], m2["input_ids"])
    changed = m1["input_ids"][:, :plain["input_ids"].shape[1]] != plain["input_ids"]
    assert changed.any() and (m1["mlm_labels"] != -100).any()


def test_rerun_replaces_earlier_output(corpus, tokenizer, tmp_path):
    out = tmp_path / "out"
    make(corpus, tokenizer, out, eval_docs=1, dupe_factor=3)
    make(corpus, tokenizer, out, dupe_factor=1)
    index = json.loads((out / "index.json").read_text())
    names = [s["name"] + ".tokens.npy" for s in index["shards"]]
    assert sorted(p.name for p in out.glob("shard-*.tokens.npy")) == names
    assert not (out / "eval" / "index.json").exists() and not list((out / "eval").glob("*.npy"))
    assert not (out / "corpus-tokens.tmp").exists()


def test_one_sentence_documents_only_random_next(tokenizer, tmp_path):
    path = tmp_path / "one.txt"
    path.write_text("The first document has only this sentence.\n\nThe second one too.\n\nAnd the third.\n")
    stats = create_pretraining_data([path], tokenizer, tmp_path / "out", fmt="lines", dupe_factor=2)
    assert stats["corpus"]["documents"] == 3
    assert stats["train"]["instances"] == 6 and stats["train"]["random_next_share"] == 1.0
    assert (load_pretraining_data(tmp_path / "out").batch(range(6))["next_sentence_label"] == 1).all()


def test_one_line_documents_and_sentences_cut_to_a_fraction_warn(tokenizer, tmp_path, caplog):
    """A document of one line, or a line so long that a row keeps a small share of it (here 8%), is a warning
    naming what it costs; ordinary data (the corpus fixture's one short document among many) none."""
    one, long = tmp_path / "one.txt", tmp_path / "long.txt"
    one.write_text("Just one line in this document.\n")
    words = " ".join(f"w{i % 9}" for i in range(400))  # two tokens a word: 800 tokens
    long.write_text(f"A first short sentence.\n{words}.\nA last one.\n\nAnother document.\nIts end.\n")
    for path, culprit, count in ((one, "1 of 1 documents are one sentence (one line)", "one_sentence_documents"),
                                 (long, "1 of 5 sentences are over twice a row's 61 tokens (--max-length 64)",
                                  "long_sentences")):
        caplog.clear()
        stats = create_pretraining_data([path], tokenizer, tmp_path / path.stem, max_seq_length=64, dupe_factor=1)
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 1 and culprit in warnings[0] and "\n" not in warnings[0], warnings
        assert stats["corpus"][count] == 1
    assert "keeps 8% of them; it begins 'w0 w1 w2 w3'" in warnings[0], warnings
    caplog.clear()
    ordinary = tmp_path / "ordinary.txt"
    ordinary.write_text("One sentence.\nTwo sentences.\n\nA second document.\nIts second line.\n")
    create_pretraining_data([ordinary], tokenizer, tmp_path / "ordinary", max_seq_length=64, dupe_factor=1)
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_corrupted_and_truncated_shards(corpus, tokenizer, tmp_path):
    out = tmp_path / "out"
    make(corpus, tokenizer, out, dupe_factor=1)
    tokens = out / "shard-00000.tokens.npy"
    original = tokens.read_bytes()
    tokens.write_bytes(original[:-10])
    with pytest.raises(BertforgeError, match=r"shard-00000\.tokens\.npy: corrupted or truncated shard") as e:
        load_pretraining_data(out)
    assert "\n" not in str(e.value)
    tokens.write_bytes(b"garbage" + original[7:])
    with pytest.raises(BertforgeError, match=r"shard-00000\.tokens\.npy: corrupted"):
        load_pretraining_data(out)
    tokens.write_bytes(original)
    offsets = out / "shard-00000.offsets.npy"
    values = np.load(offsets)
    values[3] = values[5] + 1  # a negative length
    np.save(offsets, values)
    with pytest.raises(BertforgeError, match=r"shard-00000\.offsets\.npy: corrupted shard"):
        load_pretraining_data(out)
    (out / "index.json").unlink()
    with pytest.raises(BertforgeError, match=r"index\.json: not found"):
        load_pretraining_data(out)


def test_vocab_mismatch_detected(corpus, tokenizer, tmp_path):
    out = tmp_path / "out"
    make(corpus, tokenizer, out, dupe_factor=1)
    data = load_pretraining_data(out)
    check_vocab(data, tokenizer)
    check_vocab(data.index, tokenizer)
    assert data.vocab_sha256 == vocab_sha256(tokenizer.vocab)
    vocab = dict(tokenizer.vocab)
    vocab["hello"], vocab["world"] = vocab["world"], vocab["hello"]
    other = BertTokenizer(vocab, do_lower_case=True)
    with pytest.raises(BertforgeError, match=r"index\.json: made with another vocabulary") as e:
        check_vocab(out, other)
    assert "\n" not in str(e.value)


def test_cli_functions(corpus, tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_data_create_arguments(parser)
    vocab = require_shared("models", "all-MiniLM-L6-v2")
    args = parser.parse_args(["--input", str(corpus / "story1.txt"), str(corpus / "google.txt"), "--vocab", str(vocab),
                              "--out", str(tmp_path / "out"), "--dupe-factor", "2", "--max-seq-length", "64",
                              "--eval-docs", "0.25", "--no-mask", "--no-progress"])
    assert args.dupe_factor == 2 and args.eval_docs == 0.25 and args.no_mask
    assert run_data_create(args) is None
    report, bars = capsys.readouterr()
    assert bars == ""  # --no-progress
    assert "4 documents" in report and "1 documents held out" in report and "random next" in report
    assert load_pretraining_data(tmp_path / "out", "eval").index["split"] == "eval"
    with pytest.raises(SystemExit):
        parser.parse_args(["--input", "x", "--vocab", "v", "--out", "o", "--eval-docs", "2.5"])
    with pytest.raises(BertforgeError, match="only 4 documents"):
        create_pretraining_data([corpus / "story1.txt", corpus / "google.txt"], vocab, tmp_path / "o2", eval_docs=4)


@pytest.mark.parametrize("mask", [True, False])
def test_no_nsp_rows_filled_and_joins_never_masked(corpus, tokenizer, tmp_path, mask):
    out = tmp_path / "out"
    stats = make(corpus, tokenizer, out, nsp=False, mask=mask, dupe_factor=2, eval_docs=1)
    s = stats["train"]
    assert "random_next_share" not in s and s["document_joins"] > 0 and s["split_sentences"] >= 1  # the long one
    data = load_pretraining_data(out)
    assert not data.has_pairs and data.index["nsp"] is False
    b = data.batch(np.arange(len(data)), rng=None if mask else np.random.default_rng(0))
    lengths = b["attention_mask"].sum(1)
    assert s["fill_share"] == pytest.approx(float(lengths.sum()) / (len(data) * 32))
    assert s["fill_share"] > 0.8  # sentences are whole, so a row ends up to one sentence short
    assert (b["token_type_ids"] == 0).all() and (b["next_sentence_label"] == 0).all()
    sep = tokenizer.sep_token_id
    joins = (b["input_ids"] == sep) & (torch.arange(b["input_ids"].shape[1]) < (lengths - 1)[:, None])
    assert joins.sum() > 0 and (b["special_tokens_mask"] | ~joins).all()  # a join is special
    labels = b["mlm_labels"]
    assert (labels[labels != -100] != sep).all() and (labels != -100).sum(1).min() >= 1


def test_documents_are_held_out_by_default(corpus, tmp_path, capsys):
    """auto: 1% of the documents, at least one, once there are 10; fewer: none, and the report says what that means."""
    parser = argparse.ArgumentParser()
    add_data_create_arguments(parser)
    vocab = require_shared("models", "all-MiniLM-L6-v2")
    for i in range(6, 12):  # 12 stories + the 3 documents of google.txt
        (corpus / f"story{i}.txt").write_text(f"Chapter {i}.\n\n" + STORY * 2 + "\n", encoding="utf-8")
    args = parser.parse_args(["--input", str(corpus), "--vocab", str(vocab), "--out", str(tmp_path / "many"),
                              "--dupe-factor", "1", "--no-progress"])
    assert args.eval_docs == "auto"
    run_data_create(args)
    stats = json.loads((tmp_path / "many" / "stats.json").read_text())["corpus"]
    assert (stats["documents"], stats["eval_documents"], stats["eval_docs"]) == (15, 1, "auto")
    assert len(load_pretraining_data(tmp_path / "many", "eval")) > 0
    capsys.readouterr()
    args = parser.parse_args(["--input", str(corpus / "google.txt"), "--vocab", str(vocab), "--out",
                              str(tmp_path / "few"), "--dupe-factor", "1", "--no-progress"])
    run_data_create(args)
    report = capsys.readouterr().out
    assert "0 documents held out (--eval-docs auto holds out none of fewer than 10 documents" in report
    assert not (tmp_path / "few" / "eval").exists()


def test_a_tokenizer_without_a_mask_token_is_refused_before_any_data_is_written(corpus, tmp_path):
    """A byte-level BPE tokenizer folder that names no mask token: masked-LM data cannot be made from it."""
    from tests.conftest import modernbert_tokenizer

    folder = modernbert_tokenizer(tmp_path / "tok")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["mask_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(BertforgeError, match=f"^{tmp_path / 'tok'}: no mask token, which masked-LM pre-training"):
        create_pretraining_data([corpus], folder, tmp_path / "out")
    assert not (tmp_path / "out").exists()
