"""A minimal writer of TensorFlow's checkpoint format, for tests that need checkpoints the fixture does not hold
(several shards, optimizer slots, a classifier). The reader is checked against TensorFlow's own bytes in
test_tf_checkpoint.py; this writer only has to be understood by it, so it writes the simplest valid table:
one data block, no shared key prefixes.
"""

import struct
from pathlib import Path

import numpy as np

from bertforge.model.formats.crc32c import crc32c, mask
from bertforge.model.formats.tf_checkpoint import TABLE_MAGIC

DATA_TYPES = {"float32": 1, "int32": 3, "int64": 9}


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def field(number: int, value) -> bytes:
    if isinstance(value, bytes):
        return varint(number << 3 | 2) + varint(len(value)) + value
    return varint(number << 3) + varint(value)


def entry_proto(array: np.ndarray, shard: int, offset: int) -> bytes:
    shape = b"".join(field(2, field(1, d)) for d in array.shape)
    crc = varint(6 << 3 | 5) + struct.pack("<I", mask(crc32c(array.tobytes())))
    return (field(1, DATA_TYPES[array.dtype.name]) + field(2, shape) + field(3, shard) + field(4, offset)
            + field(5, array.nbytes) + crc)


def block(items) -> bytes:
    body = b"".join(varint(0) + varint(len(k)) + varint(len(v)) + k + v for k, v in items)
    return body + struct.pack("<II", 0, 1)  # one restart point, at 0


def with_trailer(contents: bytes) -> bytes:
    return contents + b"\0" + struct.pack("<I", mask(crc32c(contents + b"\0")))


def write_checkpoint(prefix, tensors: dict[str, np.ndarray], num_shards: int = 1) -> Path:
    """Write `tensors` as PREFIX.index and PREFIX.data-*: tensor i (in name order) goes to shard i % num_shards."""
    prefix = Path(prefix)
    shards = [bytearray() for _ in range(num_shards)]
    items = [(b"", field(1, num_shards) + field(3, field(1, 1)))]  # header: shards, version {producer: 1}
    for i, name in enumerate(sorted(tensors)):
        array = np.asarray(tensors[name], order="C")
        data = shards[i % num_shards]
        items.append((name.encode(), entry_proto(array, i % num_shards, len(data))))
        data += array.tobytes()
    for k, data in enumerate(shards):
        prefix.with_name(f"{prefix.name}.data-{k:05d}-of-{num_shards:05d}").write_bytes(bytes(data))
    data_block = with_trailer(block(items))
    meta_block = with_trailer(block([]))
    index_block = with_trailer(block([(items[-1][0], varint(0) + varint(len(data_block) - 5))]))
    meta_at, index_at = len(data_block), len(data_block) + len(meta_block)
    handles = varint(meta_at) + varint(len(meta_block) - 5) + varint(index_at) + varint(len(index_block) - 5)
    footer = handles.ljust(40, b"\0") + struct.pack("<Q", TABLE_MAGIC)
    prefix.with_name(prefix.name + ".index").write_bytes(data_block + meta_block + index_block + footer)
    return prefix
