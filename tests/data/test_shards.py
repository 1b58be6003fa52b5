"""Reading pre-training shards that are damaged: every failure is a one-line BertforgeError naming the file."""

import json
import shutil
import tokenize
from itertools import islice

import numpy as np
import pytest
import torch

from bertforge.cli import main
from bertforge.data import create_pretraining_data, load_pretraining_data
from bertforge.pretraining.demo import module_documents
from bertforge.core.errors import BertforgeError
from bertforge.text.wordpiece import train_vocab
from tests.conftest import one_line_error


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("shards")
    (root / "corpus").mkdir()
    for name, text in islice(module_documents(), 12):
        (root / "corpus" / f"{name}.txt").write_text(text, encoding="utf-8")
    train_vocab([root / "corpus"], vocab_size=800, out_dir=root / "vocab")
    create_pretraining_data([root / "corpus"], root / "vocab", root / "data", max_seq_length=48, max_predictions=6,
                            dupe_factor=1, seed=1)
    return root / "data"


@pytest.fixture
def data(made, tmp_path):
    shutil.copytree(made, tmp_path / "data")
    return tmp_path / "data"


def header_end(raw: bytes) -> int:
    """Where a version 1 .npy header (magic, version, length, the dict text) ends."""
    return 10 + int.from_bytes(raw[8:10], "little")


def test_every_flipped_byte_of_an_npy_header_is_one_line_naming_the_shard(data):
    path = data / "shard-00000.offsets.npy"
    raw = path.read_bytes()
    causes = set()
    for at in range(header_end(raw)):
        for flip in (0x01, 0x20, 0x80):
            damaged = bytearray(raw)
            damaged[at] ^= flip
            path.write_bytes(bytes(damaged))
            try:
                np.load(path, mmap_mode="r", allow_pickle=False)
            except Exception as e:
                causes.add(type(e))
            try:
                load_pretraining_data(data)
            except BertforgeError as e:
                assert "\n" not in str(e) and str(e).startswith(str(path)), e
    path.write_bytes(raw)
    assert tokenize.TokenError in causes and ValueError in causes  # numpy's own failures, each turned into ours
    assert len(load_pretraining_data(data)) > 0


def test_a_shard_whose_index_lies_names_both(data):
    index = json.loads((data / "index.json").read_text())
    index["shards"][0]["instances"] += 1
    (data / "index.json").write_text(json.dumps(index))
    with pytest.raises(BertforgeError) as e:
        load_pretraining_data(data)
    one_line_error(e, data / "shard-00000.offsets.npy", data / "index.json", "says")


@pytest.mark.parametrize("change, words", [
    (lambda i: i["shards"][0].update(name="../../etc/passwd"), ["shards[0]", "not a shard entry"]),
    (lambda i: i["shards"][0].update(tokens="many"), ["shards[0]"]),
    (lambda i: i["shards"].__setitem__(0, 3), ["shards[0]"]),
    (lambda i: i.update(shards={"a": 1}), ["shards"]),
    (lambda i: i.update(token_dtype="object"), ["token_dtype", "'object'"]),
    (lambda i: i.update(max_seq_length=-3), ["max_seq_length"]),
    (lambda i: i.update(masked="no"), ["masked"]),
    (lambda i: i["special_token_ids"].pop("mask"), ["special_token_ids"]),
])
def test_an_index_with_odd_values_is_one_line_naming_it(data, change, words):
    index = json.loads((data / "index.json").read_text())
    change(index)
    (data / "index.json").write_text(json.dumps(index))
    with pytest.raises(BertforgeError) as e:
        load_pretraining_data(data)
    one_line_error(e, data / "index.json", *words)


def test_pretrain_on_a_flipped_header_exits_2_naming_the_file(data, tmp_path, capsys):
    path = data / "shard-00000.tokens.npy"
    raw = bytearray(path.read_bytes())
    raw[10] ^= 0x01  # the header's opening { becomes z
    path.write_bytes(bytes(raw))
    with pytest.raises(tokenize.TokenError):  # numpy's header parser, what used to end in a traceback
        np.load(path, mmap_mode="r", allow_pickle=False)
    run = tmp_path / "run"
    assert main(["pretrain", "--data", str(data), "--config", "tiny", "--out", str(run), "--steps", "1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("bertforge")]
    assert len(said) == 1 and "Traceback" not in err and str(path) in said[0], err
    assert not run.exists()


@pytest.mark.parametrize("mask", [True, False])
def test_a_batch_across_shards_is_its_rows_at_the_longest_one_s_width(tmp_path, monkeypatch, mask):
    """Rows drawn from several shards in any order come padded to the longest of them (or to pad_to), each row as
    read alone, static masks with their rows; dynamic masks are drawn at that width, the same for the same seed."""
    from bertforge.data import create

    monkeypatch.setattr(create, "SHARD_INSTANCES", 16)
    (tmp_path / "corpus").mkdir()
    for name, text in islice(module_documents(), 12):
        (tmp_path / "corpus" / f"{name}.txt").write_text(text, encoding="utf-8")
    train_vocab([tmp_path / "corpus"], vocab_size=800, out_dir=tmp_path / "vocab")
    create_pretraining_data([tmp_path / "corpus"], tmp_path / "vocab", tmp_path / "data", max_seq_length=48,
                            max_predictions=6, dupe_factor=1, seed=1, mask=mask)
    data = load_pretraining_data(tmp_path / "data")
    assert len(data.index["shards"]) >= 3
    short = np.flatnonzero(data.batch(np.arange(len(data)))["attention_mask"].sum(1).numpy() < data.max_seq_length)
    rows = np.random.default_rng(0).permutation(short)[:24]  # rows shorter than max_seq_length, shards mixed
    assert len(np.unique(np.searchsorted(data._starts, rows, side="right"))) >= 2
    b = data.batch(rows)
    lengths = b["attention_mask"].sum(1)
    assert b["input_ids"].shape[1] == int(lengths.max()) < data.max_seq_length
    for r, i in enumerate(rows):
        alone = data[int(i)]
        for key, value in alone.items():
            if value.dim() and key not in ("mlm_positions", "mlm_labels"):
                value = value[:int(lengths[r])]
                assert torch.equal(b[key][r, :len(value)], value), (key, i)
            else:
                assert torch.equal(b[key][r], value), (key, i)
    padded = data.batch(rows, pad_to=data.max_seq_length)
    for key, value in b.items():
        assert torch.equal(padded[key][..., :value.shape[-1]] if value.shape == b["attention_mask"].shape
                           else padded[key], value), key
    with pytest.raises(BertforgeError, match="pad_to=8 is shorter than an instance"):
        data.batch(rows, pad_to=8)
    if not mask:
        seeded = [data.batch(rows, rng=np.random.default_rng([3, 5])) for _ in range(2)]
        assert torch.equal(seeded[0]["input_ids"], seeded[1]["input_ids"])
        assert torch.equal(seeded[0]["mlm_labels"], seeded[1]["mlm_labels"]) and (seeded[0]["mlm_labels"] != -100).any()
