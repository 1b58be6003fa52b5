"""Tokenizers of other kinds than WordPiece (ModernBERT's byte-level BPE), read from tokenizer.json, against
transformers' fast tokenizer on the same file (the reference): ids, offsets, pairs, truncation windows."""

import json

import pytest

from bertforge.core.errors import BertforgeError
from bertforge.text.tokenizer import BertTokenizer, PipelineTokenizer
from tests.conftest import MODERNBERT_TEXTS, modernbert_tokenizer

transformers = pytest.importorskip("transformers")

TEXTS = ["A gripping film, beautifully shot.", "  leading spaces and   runs of them", "Ünïcödé 🙂 12345",
         "The capital of [MASK] is Paris.", ""]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return modernbert_tokenizer(tmp_path_factory.mktemp("bpe"))


def reference(folder):
    return transformers.PreTrainedTokenizerFast.from_pretrained(folder)


def test_a_byte_level_bpe_folder_is_read_as_its_own_kind(folder):
    tokenizer = BertTokenizer.from_pretrained(folder)
    assert isinstance(tokenizer, PipelineTokenizer)
    assert (tokenizer.cls_token, tokenizer.sep_token, tokenizer.mask_token) == ("[CLS]", "[SEP]", "[MASK]")
    assert tokenizer.model_max_length == 8192


def test_ids_and_offsets_are_the_references(folder):
    ours, theirs = BertTokenizer.from_pretrained(folder), reference(folder)
    for text in TEXTS + MODERNBERT_TEXTS[:7]:
        a = ours(text, return_offsets_mapping=True)
        b = theirs(text, return_offsets_mapping=True)
        assert a["input_ids"] == b["input_ids"], text
        assert [tuple(o) for o in a["offset_mapping"]] == [tuple(o) for o in b["offset_mapping"]], text


def test_pairs_padding_and_truncation_are_the_references(folder):
    ours, theirs = BertTokenizer.from_pretrained(folder), reference(folder)
    kw = dict(padding=True, truncation=True, max_length=12)
    a = ours(TEXTS[:3], TEXTS[1:4], **kw)
    b = theirs(TEXTS[:3], TEXTS[1:4], **kw)
    assert a["input_ids"] == b["input_ids"] and a["attention_mask"] == b["attention_mask"]


def test_overflowing_windows_are_the_references(folder):
    ours, theirs = BertTokenizer.from_pretrained(folder), reference(folder)
    question, context = "Who was born in Virginia?", " ".join(MODERNBERT_TEXTS[:6])
    kw = dict(truncation="only_second", max_length=24, stride=6, return_overflowing_tokens=True,
              return_offsets_mapping=True)
    a, b = ours(question, context, **kw), theirs(question, context, **kw)
    assert a["input_ids"] == b["input_ids"] and len(a["input_ids"]) > 2
    assert [[tuple(o) for o in row] for row in a["offset_mapping"]] == \
        [[tuple(o) for o in row] for row in b["offset_mapping"]]


def test_decoding_round_trips_and_saving_keeps_the_kind(folder, tmp_path):
    tokenizer = BertTokenizer.from_pretrained(folder)
    ids = tokenizer("Ünïcödé 🙂 12345")["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "Ünïcödé 🙂 12345"
    tokenizer.save_pretrained(tmp_path / "again")
    again = BertTokenizer.from_pretrained(tmp_path / "again")
    assert isinstance(again, PipelineTokenizer) and again(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]
    assert reference(tmp_path / "again")(TEXTS)["input_ids"] == tokenizer(TEXTS)["input_ids"]


def test_a_special_token_missing_from_the_vocabulary_is_one_line(folder, tmp_path):
    broken = modernbert_tokenizer(tmp_path / "broken")
    config = json.loads((broken / "tokenizer_config.json").read_text())
    (broken / "tokenizer_config.json").write_text(json.dumps({**config, "mask_token": "<mask>"}))
    with pytest.raises(BertforgeError, match="mask_token '<mask>' is not in tokenizer.json's vocabulary"):
        BertTokenizer.from_pretrained(broken)
