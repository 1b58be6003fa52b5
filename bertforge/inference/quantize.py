"""Embeddings at lower precision, bit for bit as sentence-transformers' `quantize_embeddings` writes them, and what
a search needs to compare with them.

- int8 / uint8: each dimension cut into 256 buckets between a calibration range's minimum and maximum (`ranges`,
  [2, dims]: the minima then the maxima, from calibration embeddings or the embeddings themselves); uint8 holds the
  bucket, int8 the bucket less 128. The ranges are kept (a manifest's) so that queries are quantized the same way.
- binary / ubinary: one bit a dimension (value > 0), packed 8 to a byte, big-endian within the byte (numpy's
  packbits); ubinary the bytes, binary the bytes less 128 as int8.
- float32: the vectors as they are.

`dequantize` maps int8/uint8 values back to the floats' scale and `unpack` bits back to 0/1 values, for the float
query's rescoring of candidates; `hamming` counts differing bits."""

from __future__ import annotations

import numpy as np

from ..core.errors import BertforgeError

PRECISIONS = ("float32", "int8", "uint8", "binary", "ubinary")
DTYPES = {"float32": np.float32, "int8": np.int8, "uint8": np.uint8, "binary": np.int8, "ubinary": np.uint8}


def check_precision(precision: str, name: str = "--precision") -> str:
    if precision not in PRECISIONS:
        raise BertforgeError(f"{name} {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return precision


def is_scalar(precision: str) -> bool:
    """int8 or uint8: quantized by ranges."""
    return precision.endswith("int8")


def is_binary(precision: str) -> bool:
    return precision.endswith("binary")


def width(precision: str, dims: int) -> int:
    """Values a vector of `dims` dimensions holds at `precision` (packed bits: a byte per 8)."""
    return (dims + 7) // 8 if is_binary(precision) else dims


def ranges_of(embeddings: np.ndarray, source: str = "the calibration embeddings") -> np.ndarray:
    """[2, dims]: each dimension's minimum and maximum over `embeddings` [n, dims] (n >= 2), as float32."""
    embeddings = np.asarray(embeddings)
    if embeddings.ndim != 2 or len(embeddings) < 2:
        raise BertforgeError(f"{source}: int8/uint8 ranges need at least 2 embeddings [rows, dims], not shape "
                             f"{list(embeddings.shape)}")
    return np.vstack((embeddings.min(0), embeddings.max(0))).astype(np.float32)


def check_ranges(ranges, dims: int, source: str) -> np.ndarray:
    ranges = np.asarray(ranges, dtype=np.float32)
    if ranges.shape != (2, dims) or not np.isfinite(ranges).all():
        raise BertforgeError(f"{source}: int8/uint8 ranges must be 2 x {dims} finite numbers (minima, maxima), not "
                             f"shape {list(ranges.shape)}")
    return ranges


def _steps(ranges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ranges = ranges.astype(np.float32, copy=False)
    steps = (ranges[1, :] - ranges[0, :]) / 255
    return ranges[0, :], np.where(steps == 0, 1, steps)


def quantize(embeddings: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """Float embeddings [n, dims] at `precision`; int8/uint8 by `ranges` (None: the embeddings' own, as
    sentence-transformers computes them when given none)."""
    check_precision(precision, "precision")
    embeddings = np.asarray(embeddings)
    if embeddings.dtype in (np.int8, np.uint8):
        raise BertforgeError("embeddings to quantize must be floats, not int8 or uint8")
    if precision == "float32":
        return embeddings.astype(np.float32)
    if is_scalar(precision):
        starts, steps = _steps(ranges_of(embeddings, "the embeddings") if ranges is None else ranges)
        buckets = np.clip(np.floor((embeddings - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    bits = np.packbits(embeddings > 0, axis=-1)
    return bits if precision == "ubinary" else (bits - 128).astype(np.int8)


def dequantize(values: np.ndarray, precision: str, ranges: np.ndarray) -> np.ndarray:
    """int8/uint8 values back on the floats' scale (each bucket's lower end), float64, as sentence-transformers'
    rescoring reads them."""
    starts, steps = _steps(ranges)
    values = values.astype(np.float64)
    if precision == "int8":
        values += 128
    return values * steps + starts


def as_bytes(values: np.ndarray, precision: str) -> np.ndarray:
    """Packed bits as uint8 bytes (binary's int8 values plus 128)."""
    return values.view(np.uint8) ^ np.uint8(0x80) if precision == "binary" else values.astype(np.uint8, copy=False)


def unpack(values: np.ndarray, precision: str, dims: int) -> np.ndarray:
    """Packed bits [n, bytes] as 0/1 values [n, dims] (float32)."""
    return np.unpackbits(as_bytes(values, precision), axis=-1)[..., :dims].astype(np.float32)



def as_floats(values: np.ndarray, precision: str, dims: int, ranges: np.ndarray | None) -> np.ndarray:
    """Stored vectors as the floats a float query is scored against: float32 as they are, binary unpacked to 0/1,
    int8/uint8 dequantized (what rescoring and an approximate index read)."""
    if is_binary(precision):
        return unpack(values, precision, dims)
    if is_scalar(precision):
        return dequantize(values, precision, ranges)
    return np.asarray(values, dtype=np.float32)

if hasattr(np, "bitwise_count"):
    def _popcount(values: np.ndarray) -> np.ndarray:
        return np.bitwise_count(values)
else:  # numpy < 2
    _BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)

    def _popcount(values: np.ndarray) -> np.ndarray:
        return _BITS[values]


def hamming(query: np.ndarray, values: np.ndarray, precision: str) -> np.ndarray:
    """The number of bits where each packed vector of `values` [n, bytes] differs from `query` [bytes]."""
    differ = as_bytes(values, precision) ^ as_bytes(np.asarray(query), precision)
    return _popcount(differ).sum(-1, dtype=np.int64)
