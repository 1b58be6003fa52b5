"""The TensorFlow checkpoint reader: the bytes TensorFlow wrote for Google's tiny BERT, several shards, and a
one-line error for each kind of damage."""

import shutil
import struct

import numpy as np
import pytest

from bertforge.model.formats.crc32c import crc32c, mask, unmask
from bertforge.core.errors import BertforgeError
from bertforge.model.formats.tf_checkpoint import TFCheckpoint, find_prefix, read_table, varint
from tests.conftest import one_line_error, require_shared
from tests.tf_bundle import write_checkpoint

DATA = "bert_model.ckpt.data-00000-of-00001"
INDEX = "bert_model.ckpt.index"


@pytest.fixture(scope="module")
def fixture_dir():
    return require_shared("models", "google-tf-tiny")


def test_entries_are_what_tensorflow_wrote(fixture_dir):
    ckpt = TFCheckpoint(find_prefix(fixture_dir))
    assert ckpt.num_shards == 1 and ckpt.byteorder == "<"
    assert len(ckpt.entries) == 46  # as the fixture's README says
    assert ckpt.entries["bert/embeddings/word_embeddings"].shape == (30522, 128)
    assert ckpt.entries["bert/encoder/layer_1/intermediate/dense/kernel"].shape == (128, 512)  # [in, out]
    assert ckpt.entries["cls/seq_relationship/output_weights"].shape == (2, 128)
    assert {e.dtype for e in ckpt.entries.values()} == {"float32"}


def test_every_tensor_is_the_bytes_in_the_file(fixture_dir):
    """Each tensor's values are the file's bytes at the index's offset, and their CRC-32C is the one TensorFlow
    computed when it wrote them; together the tensors cover the data file exactly, with no gap."""
    ckpt = TFCheckpoint(find_prefix(fixture_dir))
    data = (fixture_dir / DATA).read_bytes()
    end = 0
    for entry in sorted(ckpt.entries.values(), key=lambda e: e.offset):
        assert entry.offset == end, entry.name
        end += entry.size
        values = ckpt.read(entry.name)
        assert values.dtype == np.float32 and values.shape == entry.shape
        assert values.tobytes() == data[entry.offset:entry.offset + entry.size]
        assert crc32c(values.tobytes()) == unmask(entry.crc32c)
    assert end == len(data)


def test_values_are_views_of_the_mapped_file(fixture_dir):
    ckpt = TFCheckpoint(find_prefix(fixture_dir))
    values = ckpt.read("bert/embeddings/word_embeddings")
    assert not values.flags.owndata and values.base is not None


def test_prefix_from_folder_index_file_or_state_file(fixture_dir, tmp_path):
    prefix = fixture_dir / "bert_model.ckpt"
    assert find_prefix(fixture_dir) == prefix
    assert find_prefix(prefix) == prefix
    assert find_prefix(fixture_dir / INDEX) == prefix
    tensors = {"a": np.arange(6, dtype=np.float32).reshape(2, 3)}
    write_checkpoint(tmp_path / "model.ckpt-100", tensors)
    write_checkpoint(tmp_path / "model.ckpt-200", tensors)
    with pytest.raises(BertforgeError, match="several TensorFlow checkpoints"):
        find_prefix(tmp_path)
    # TensorFlow's state file, holding the path where training ran (the folder has moved since)
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "/old/run/model.ckpt-100"\n'
                                         'all_model_checkpoint_paths: "/old/run/model.ckpt-100"\n')
    assert find_prefix(tmp_path) == tmp_path / "model.ckpt-100"
    assert find_prefix(tmp_path / "nothing") is None


def test_several_shards_and_dtypes(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {f"t{i}": rng.standard_normal((i + 1, 3)).astype(np.float32) for i in range(5)}
    tensors["global_step"] = np.array(123456789012, dtype=np.int64)
    tensors["counts"] = np.arange(7, dtype=np.int32)
    ckpt = TFCheckpoint(write_checkpoint(tmp_path / "model.ckpt", tensors, num_shards=3))
    assert ckpt.num_shards == 3 and {e.shard for e in ckpt.entries.values()} == {0, 1, 2}
    for name, expected in tensors.items():
        values = ckpt.read(name)
        assert values.dtype == expected.dtype and values.shape == expected.shape
        assert np.array_equal(values, expected)


# ---------------------------------------------------------------------------------------------------------
# Damage: each a one-line error naming the file (and the tensor, where one is at fault)


def damaged_copy(fixture_dir, tmp_path):
    folder = tmp_path / "google"
    shutil.copytree(fixture_dir, folder)
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


def read_all(folder):
    ckpt = TFCheckpoint(find_prefix(folder))
    for name in ckpt.entries:
        ckpt.read(name)


def test_truncated_shard(fixture_dir, tmp_path):
    folder = damaged_copy(fixture_dir, tmp_path)
    data = folder / DATA
    data.write_bytes(data.read_bytes()[:-1000])
    with pytest.raises(BertforgeError) as excinfo:
        read_all(folder)
    assert "truncated" in one_line_error(excinfo, data, "cls/seq_relationship/output_weights")


def test_flipped_byte_fails_the_checksum(fixture_dir, tmp_path):
    folder = damaged_copy(fixture_dir, tmp_path)
    ckpt = TFCheckpoint(find_prefix(folder))
    entry = ckpt.entries["bert/encoder/layer_1/attention/self/value/kernel"]
    data = bytearray((folder / DATA).read_bytes())
    data[entry.offset + 1001] ^= 0x10
    (folder / DATA).write_bytes(bytes(data))
    with pytest.raises(BertforgeError) as excinfo:
        read_all(folder)
    assert "checksum" in one_line_error(excinfo, folder / DATA, entry.name)


@pytest.mark.parametrize("missing", [INDEX, DATA], ids=["index", "shard"])
def test_missing_file(fixture_dir, tmp_path, missing):
    folder = damaged_copy(fixture_dir, tmp_path)
    (folder / missing).unlink()
    with pytest.raises(BertforgeError) as excinfo:
        read_all(folder)
    assert "not found" in one_line_error(excinfo, folder / missing)


@pytest.mark.parametrize("content", [b"", b"model_checkpoint_path: x\n" * 10, bytes(200)])
def test_index_that_is_not_a_table(fixture_dir, tmp_path, content):
    folder = damaged_copy(fixture_dir, tmp_path)
    (folder / INDEX).write_bytes(content)
    with pytest.raises(BertforgeError) as excinfo:
        read_all(folder)
    assert "not a TensorFlow checkpoint index" in one_line_error(excinfo, folder / INDEX)


def test_damaged_index_block(fixture_dir, tmp_path):
    folder = damaged_copy(fixture_dir, tmp_path)
    index = bytearray((folder / INDEX).read_bytes())
    index[100] ^= 0x01
    (folder / INDEX).write_bytes(bytes(index))
    with pytest.raises(BertforgeError) as excinfo:
        read_all(folder)
    assert "fails its checksum" in one_line_error(excinfo, folder / INDEX)


def test_compressed_block_is_refused(tmp_path):
    prefix = write_checkpoint(tmp_path / "model.ckpt", {"a": np.zeros(3, np.float32)})
    index = prefix.with_name("model.ckpt.index")
    data = bytearray(index.read_bytes())
    block_end, _ = varint(data[-48:], 0)  # the metaindex block follows the data block
    data[block_end - 5] = 1  # the data block's compression byte: snappy
    struct.pack_into("<I", data, block_end - 4, mask(crc32c(bytes(data[:block_end - 4]))))
    index.write_bytes(bytes(data))
    with pytest.raises(BertforgeError) as excinfo:
        read_table(index)
    assert "snappy-compressed" in one_line_error(excinfo, index)
