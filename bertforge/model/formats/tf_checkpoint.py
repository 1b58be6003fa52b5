"""TensorFlow checkpoints (the tensor-bundle format of `tf.train.Saver`), read without TensorFlow.

A checkpoint PREFIX is two kinds of file:
- `PREFIX.index`: a LevelDB-format table (sorted keys in blocks, each block followed by a compression byte and
  a masked CRC-32C, then an index block and a 48-byte footer). The key "" holds a BundleHeaderProto (number of
  shards, endianness); every other key is a tensor name whose value is a BundleEntryProto (dtype, shape,
  shard, offset, size, masked CRC-32C of the bytes).
- `PREFIX.data-0000k-of-0000N`: the tensors' raw bytes, back to back.
Tensors are numpy views of memory-mapped shards, so reading a large checkpoint costs no second copy in memory;
each tensor's checksum is verified the first time it is read.
"""

import os
import re
import struct
from dataclasses import dataclass
from math import prod
from pathlib import Path

import numpy as np

from .crc32c import crc32c, unmask
from ...core.errors import BertforgeError
from ...core.io import has_model_file, model_file, read_model_text

TABLE_MAGIC = 0xDB4775248B80FB57
FOOTER_SIZE = 48
BLOCK_TRAILER = 5  # compression type (1 byte) + masked crc32c (4 bytes)
COMPRESSION = {0: None, 1: "snappy", 2: "zlib"}

# TensorFlow's DataType enum -> numpy. bfloat16 has no numpy type: its raw 16 bits are returned (see `Entry`).
DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 9: "int64", 10: "bool",
          14: "bfloat16", 17: "uint16", 19: "float16", 22: "uint32", 23: "uint64"}
DT_STRING = 7


@dataclass(frozen=True)
class Entry:
    """Where one tensor lies: dtype (a numpy name, or "bfloat16", or "string"), shape, and its bytes."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc32c: int  # masked, as stored
    sliced: bool  # a partitioned variable, stored as slices under other keys

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype("uint16" if self.dtype == "bfloat16" else self.dtype)


# ---------------------------------------------------------------------------------------------------------
# Protocol-buffer wire format, just enough for the two messages of the index


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned base-128 varint at `pos`: (value, position after it)."""
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def fields(buf: bytes):
    """(field number, value) for each field of a message: ints for varints and fixed widths, bytes otherwise."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = bytes(buf[pos:pos + length]), pos + length
            if pos > len(buf):
                raise ValueError("field runs past the end of the message")
        elif wire == 5:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise ValueError(f"unknown wire type {wire}")
        yield number, value


def parse_shape(buf: bytes) -> tuple[int, ...]:
    """TensorShapeProto: repeated Dim (field 2) whose size is field 1."""
    dims = []
    for number, value in fields(buf):
        if number == 2:
            dims.append(signed64(dict(fields(value)).get(1, 0)))
        elif number == 3 and value:
            raise ValueError("shape of unknown rank")
    return tuple(dims)


def parse_entry(name: str, buf: bytes) -> Entry:
    """BundleEntryProto: dtype 1, shape 2, shard_id 3, offset 4, size 5, crc32c 6, slices 7."""
    f = {"dtype": 0, "shape": (), "shard": 0, "offset": 0, "size": 0, "crc32c": 0, "sliced": False}
    for number, value in fields(buf):
        if number == 1:
            f["dtype"] = value
        elif number == 2:
            f["shape"] = parse_shape(value)
        elif 3 <= number <= 6:
            f[("shard", "offset", "size", "crc32c")[number - 3]] = value
        elif number == 7:
            f["sliced"] = True
    dtype = "string" if f["dtype"] == DT_STRING else DTYPES.get(f["dtype"], f"DataType {f['dtype']}")
    return Entry(name=name, **{**f, "dtype": dtype})


# ---------------------------------------------------------------------------------------------------------
# The LevelDB table of the index


def block(data: bytes, offset: int, size: int, path: Path) -> bytes:
    """The contents of the block at (offset, size), its trailer checked."""
    if offset + size + BLOCK_TRAILER > len(data):
        raise BertforgeError(f"{path}: block at byte {offset} runs past the end of the file (truncated?)")
    contents, kind = data[offset:offset + size], data[offset + size]
    stored = struct.unpack_from("<I", data, offset + size + 1)[0]
    if crc32c(data[offset:offset + size + 1]) != unmask(stored):
        raise BertforgeError(f"{path}: block at byte {offset} fails its checksum; the file is damaged")
    if COMPRESSION.get(kind, "unknown") is not None:
        raise BertforgeError(f"{path}: block at byte {offset} is {COMPRESSION.get(kind, f'type-{kind}')}-compressed; "
                             "only uncompressed tables (what TensorFlow writes for checkpoints) are read")
    return contents


def block_entries(contents: bytes):
    """(key, value) pairs of a block: keys share prefixes with the previous key; restart offsets at the end."""
    restarts = struct.unpack_from("<I", contents, len(contents) - 4)[0]
    end = len(contents) - 4 - 4 * restarts
    if end < 0:
        raise ValueError("restart array larger than the block")
    pos, key = 0, b""
    while pos < end:
        shared, pos = varint(contents, pos)
        unshared, pos = varint(contents, pos)
        length, pos = varint(contents, pos)
        key = key[:shared] + contents[pos:pos + unshared]
        pos += unshared
        yield key, contents[pos:pos + length]
        pos += length
    if pos != end:
        raise ValueError("entries overrun the restart array")


def read_table(path: Path) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a LevelDB-format table file, in order."""
    with open(model_file(path), "rb") as f:
        data = f.read()
    if len(data) < FOOTER_SIZE or struct.unpack_from("<Q", data, len(data) - 8)[0] != TABLE_MAGIC:
        raise BertforgeError(f"{path}: not a TensorFlow checkpoint index (no LevelDB table footer)")
    try:
        footer = data[-FOOTER_SIZE:]
        _, pos = varint(footer, varint(footer, 0)[1])  # the metaindex handle (unused: no filters in checkpoints)
        index_offset, pos = varint(footer, pos)
        index_size, _ = varint(footer, pos)
        items = []
        for _, handle in block_entries(block(data, index_offset, index_size, path)):
            offset, pos = varint(handle, 0)
            size, _ = varint(handle, pos)
            items.extend(block_entries(block(data, offset, size, path)))
    except (IndexError, ValueError, struct.error) as e:
        raise BertforgeError(f"{path}: not a valid checkpoint index ({e})") from None
    return items


# ---------------------------------------------------------------------------------------------------------
# The checkpoint


def find_prefix(path) -> Path | None:
    """The checkpoint prefix that `path` names: the prefix itself, its `.index` file, or a folder holding one
    checkpoint (or a `checkpoint` state file naming it). None where there is no TensorFlow checkpoint."""
    path = Path(path)
    if path.suffix == ".index" and path.is_file():
        return path.with_suffix("")
    if path.with_name(path.name + ".index").is_file():
        return path
    if not path.is_dir():
        return None
    state = path / "checkpoint"
    if has_model_file(state):
        found = re.search(r'^model_checkpoint_path:\s*"(.*)"', read_model_text(state), re.M)
        if found:
            named = Path(found.group(1))
            named = named if named.is_absolute() else path / named
            if named.with_name(named.name + ".index").is_file():
                return named
            local = path / named.name  # a folder moved after training: the state file holds the old path
            if local.with_name(local.name + ".index").is_file():
                return local
    indexes = sorted(path.glob("*.index"))
    if len(indexes) > 1:
        names = ", ".join(p.stem for p in indexes)
        raise BertforgeError(f"{path}: several TensorFlow checkpoints ({names}); pass the one to read, "
                             f"e.g. {indexes[-1].with_suffix('')}")
    if indexes:
        return indexes[0].with_suffix("")
    shards = sorted(path.glob("*.data-*-of-*"))  # data without its index: name the index that is missing
    return path / shards[0].name.rsplit(".data-", 1)[0] if shards else None


class TFCheckpoint:
    """The tensors of a TensorFlow checkpoint: `entries` (name -> Entry) at once, values on `read(name)`."""

    def __init__(self, prefix):
        self.prefix = Path(prefix)
        self.index = self.prefix.with_name(self.prefix.name + ".index")
        if not self.index.is_file():
            raise BertforgeError(f"{self.index}: checkpoint index not found")
        items = read_table(self.index)
        header = dict(fields(items[0][1])) if items and items[0][0] == b"" else None
        if header is None:
            raise BertforgeError(f"{self.index}: not a checkpoint index (no bundle header)")
        self.num_shards = header.get(1, 1)
        self.byteorder = "<" if header.get(2, 0) == 0 else ">"
        self.entries: dict[str, Entry] = {}
        for key, value in items[1:]:
            name = key.decode("utf-8", errors="replace")
            try:
                self.entries[name] = parse_entry(name, value)
            except (IndexError, ValueError, struct.error) as e:
                raise BertforgeError(f"{self.index}: entry {name!r} cannot be read ({e})") from None
        self._shards: dict[int, np.ndarray] = {}
        self._verified: set[str] = set()

    def shard_path(self, shard: int) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}.data-{shard:05d}-of-{self.num_shards:05d}")

    def shard(self, shard: int) -> np.ndarray:
        """The shard's bytes, memory-mapped copy-on-write (writable views, the file untouched)."""
        if shard not in self._shards:
            path = self.shard_path(shard)
            if not os.path.lexists(path):
                raise BertforgeError(f"{path}: data shard not found (the checkpoint has {self.num_shards})")
            real = model_file(path, limit=None)
            self._shards[shard] = np.memmap(real, np.uint8, "c") if real.stat().st_size else np.zeros(0, np.uint8)
        return self._shards[shard]

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes as stored, checksum verified."""
        entry = self.entries.get(name)
        if entry is None:
            raise BertforgeError(f"{self.index}: no tensor named {name!r}")
        path = self.shard_path(entry.shard)
        if entry.sliced:
            raise BertforgeError(f"{self.index}: {name} is a partitioned variable (saved as slices), not supported")
        if entry.shard >= self.num_shards:
            raise BertforgeError(f"{self.index}: {name} is in shard {entry.shard}, beyond the {self.num_shards}")
        data = self.shard(entry.shard)
        if entry.offset + entry.size > len(data):
            raise BertforgeError(f"{path}: {name} needs bytes {entry.offset}..{entry.offset + entry.size} but the "
                                 f"file has {len(data)} (truncated)")
        raw = data[entry.offset:entry.offset + entry.size]
        if name not in self._verified:
            actual = crc32c(raw)
            if actual != unmask(entry.crc32c):
                raise BertforgeError(f"{path}: {name} fails its checksum (crc32c {actual:08x}, index says "
                                     f"{unmask(entry.crc32c):08x}); the file is damaged")
            self._verified.add(name)
        return raw

    def read(self, name: str) -> np.ndarray:
        """The tensor as a numpy array viewing the mapped shard (bfloat16 as its uint16 bits)."""
        entry = self.entries.get(name)
        if entry is not None and (entry.dtype == "string" or entry.dtype.startswith("DataType")):
            raise BertforgeError(f"{self.index}: {name} holds {entry.dtype} values, which are not read")
        raw = self.raw(name)
        dtype = entry.numpy_dtype.newbyteorder(self.byteorder)
        if entry.size != prod(entry.shape) * dtype.itemsize:
            raise BertforgeError(f"{self.index}: {name} has {entry.size} bytes, not the {prod(entry.shape)} "
                                 f"{entry.dtype} values of shape {entry.shape}")
        if entry.offset % dtype.itemsize:  # misaligned in the file: a copy, so that torch can share it
            raw = raw.copy()
        values = raw.view(dtype).reshape(entry.shape)
        return np.asarray(values) if self.byteorder == "<" else values.astype(values.dtype.newbyteorder("<"))
