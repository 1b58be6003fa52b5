"""Tokenizers of other kinds than WordPiece (ModernBERT's byte-level BPE), read from tokenizer.json, against
transformers' fast tokenizer on the same file (the reference): ids, offsets, pairs, truncation windows."""

import json
import subprocess
import sys

import pytest

from bertforge.core.errors import BertforgeError
from bertforge.text.tokenizer import BertTokenizer, PipelineTokenizer
from tests.conftest import MODERNBERT_TEXTS, REPO, modernbert_tokenizer

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


# ------------------------------------------------------------------------------- hostile folders: checked at load

def edited(tmp_path, change, file="tokenizer.json"):
    """The tokenizer folder with `change` made to one of its JSON files."""
    folder = modernbert_tokenizer(tmp_path / "edited")
    content = json.loads((folder / file).read_text())
    change(content)
    (folder / file).write_text(json.dumps(content))
    return folder


def one_line(folder, *words):
    with pytest.raises(BertforgeError) as e:
        BertTokenizer.from_pretrained(folder)
    message = str(e.value)
    assert "\n" not in message and all(word in message for word in words), message
    return message


def test_the_files_own_padding_and_truncation_are_never_applied(tmp_path):
    """As transformers (which resets them on every call): padding and truncation are the call's. A file saying
    `truncation: {max_length: 2}` cut every input to two tokens; `padding: Fixed` padded every one to its size."""
    def settle(pipeline):
        pipeline["truncation"] = {"direction": "Right", "max_length": 2, "strategy": "LongestFirst", "stride": 0}
        pipeline["padding"] = {"strategy": {"Fixed": 10**6}, "direction": "Right", "pad_to_multiple_of": None,
                               "pad_id": 4, "pad_type_id": 0, "pad_token": "[PAD]"}
    folder = edited(tmp_path, settle)
    ours, theirs = BertTokenizer.from_pretrained(folder), reference(folder)
    text = MODERNBERT_TEXTS[4]
    assert ours(text)["input_ids"] == theirs(text)["input_ids"] and len(ours(text)["input_ids"]) > 10
    a, b = ours(TEXTS[:3], padding=True), theirs(TEXTS[:3], padding=True)
    assert a["input_ids"] == b["input_ids"] and len(a["input_ids"][0]) < 100
    ours(text, truncation=True, max_length=8, stride=2, return_overflowing_tokens=True)  # windows: on a copy
    backend = ours.backend_tokenizer
    assert backend.truncation is None and backend.padding is None
    assert ours(text)["input_ids"] == theirs(text)["input_ids"]


def test_a_missing_pad_token_is_the_models_or_refused_at_load(tmp_path):
    """Every batch of inputs is padded: without a pad token in the tokenizer files, config.json's pad_token_id
    names it; without that either, the folder is refused at load (transformers loads it and refuses to pad)."""
    folder = edited(tmp_path, lambda config: config.pop("pad_token"), "tokenizer_config.json")
    with pytest.raises(ValueError, match="does not have a padding token"):
        reference(folder)(TEXTS[:2], padding=True)
    assert one_line(folder) == (f"{folder} has no pad token: tokenizer files name none and config.json has no "
                                "pad_token_id (name one as pad_token in tokenizer_config.json)")
    pad_id = reference(folder).convert_tokens_to_ids("[PAD]")
    (folder / "config.json").write_text(json.dumps({"vocab_size": 500, "pad_token_id": pad_id}))
    tokenizer = BertTokenizer.from_pretrained(folder)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("[PAD]", pad_id)
    padded = tokenizer(["a", "a longer text"], padding=True)
    assert padded["input_ids"][0][-1] == pad_id and padded["attention_mask"][0][-1] == 0
    (folder / "config.json").write_text(json.dumps({"vocab_size": 500, "pad_token_id": 10**6}))
    one_line(folder, "config.json: pad_token_id 1000000 is not an id of tokenizer.json's vocabulary")


def duplicate_id(pipeline):
    pipeline["model"]["vocab"]["zzz"] = pipeline["model"]["vocab"]["!"]


def negative_added_id(pipeline):
    pipeline["added_tokens"].append({"id": -5, "content": "<x>", "single_word": False, "lstrip": False,
                                     "rstrip": False, "normalized": False, "special": True})


def word_level_without_unk(pipeline):
    vocab = {token: i for i, token in enumerate(["[CLS]", "[SEP]", "[PAD]", "[MASK]", "a", "b"])}
    pipeline.update(model={"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}, decoder=None,
                    pre_tokenizer={"type": "Whitespace"}, post_processor=None,
                    added_tokens=[{**token, "id": vocab[token["content"]]} for token in pipeline["added_tokens"]
                                  if token["content"] in vocab])


@pytest.mark.parametrize("change, words", [
    (duplicate_id, ["tokenizer.json: tokens '!' and 'zzz' both have id"]),
    (negative_added_id, ["tokenizer.json: added token '<x>' has id -5, not a whole number from 0"]),
    (word_level_without_unk, ["tokenizer.json: the WordLevel model's unk_token '[UNK]' is not in its vocab"]),
    (lambda pipeline: pipeline["model"].pop("vocab"), ["tokenizer.json: the BPE model's vocab is NoneType"]),
])
def test_the_vocabulary_is_checked_before_it_is_built(tmp_path, change, words):
    """Two tokens of one id, an added token of id -5 (dropped or refused by the library with no name), a WordLevel
    model without its unknown-word token (the library's bare Exception at the first unknown word)."""
    folder = edited(tmp_path, change)
    if change is word_level_without_unk:
        (folder / "tokenizer_config.json").write_text(json.dumps({"cls_token": "[CLS]", "sep_token": "[SEP]",
                                                                  "pad_token": "[PAD]"}))
    one_line(folder, *words)


def test_a_vocabulary_larger_than_the_model_is_refused_before_it_is_built(tmp_path):
    folder = modernbert_tokenizer(tmp_path / "tok")
    (folder / "config.json").write_text(json.dumps({"vocab_size": 100}))
    one_line(folder, "tokenizer.json: the vocabulary has", "more than the 100 rows of the model's embedding table "
                                                           "(config.json vocab_size)")


REFUSED_UNDER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))
from bertforge.core.errors import BertforgeError
from bertforge.text.tokenizer import BertTokenizer
try:
    BertTokenizer.from_pretrained(sys.argv[1])
except BertforgeError as e:
    print(e)
"""


@pytest.mark.parametrize("file", ["tokenizer.json", "vocab.txt"])
def test_an_absurd_vocabulary_is_refused_before_it_is_parsed(tmp_path, file):
    """Three million tokens beside a model of 50,368: refused in a process of 400 MB at most. Parsed, the
    tokenizer.json (64 MB) took 2.1 GB and a minute; vocab.txt's lines are counted before any is made."""
    folder = modernbert_tokenizer(tmp_path / "tok")
    (folder / "config.json").write_text(json.dumps({"vocab_size": 50368}))
    tokens = (f"t{i}" for i in range(3_000_000))
    if file == "vocab.txt":
        (folder / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n" + "\n".join(tokens) + "\n")
    else:
        pipeline = json.loads((folder / "tokenizer.json").read_text())
        pipeline["model"]["vocab"] = {}
        head, tail = json.dumps(pipeline).split('"vocab": {}')
        (folder / "tokenizer.json").write_text(head + '"vocab": {' + ",".join(f'"{t}": {i}' for i, t in
                                                                             enumerate(tokens)) + "}" + tail)
    done = subprocess.run([sys.executable, "-c", REFUSED_UNDER.format(cap=400 << 20), str(folder)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0 and not done.stderr, done.stderr[-2000:]
    if file == "vocab.txt":
        assert done.stdout.strip() == (f"{folder / 'vocab.txt'}: the vocabulary has 3000005 tokens, more than the "
                                       "50368 rows of the model's embedding table (config.json vocab_size); use the "
                                       "model's own vocabulary, or resize its embeddings to the vocabulary")
    else:
        size = (folder / "tokenizer.json").stat().st_size / 2**20
        assert done.stdout.strip() == (f"{folder / 'tokenizer.json'}: {size:.1f} MiB, too large for a vocabulary of "
                                       "the 50368 rows of the model's embedding table (config.json vocab_size), "
                                       "which takes at most 13.3 MiB (1 MiB and 256 bytes a row); refused unread")
