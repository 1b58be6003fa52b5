"""CRC-32C (Castagnoli), the checksum of TensorFlow's checkpoints and LevelDB tables, and its masked form.

Pure numpy: a table walk is serial, so the data is cut into many equal lanes that are walked side by side
(a few numpy operations per 4-byte word advance every lane, with two 65,536-entry tables), and the lanes'
checksums are then joined pairwise. Joining rests on CRC being linear: with the register started at 0,
crc(A + B) = Z_|B|(crc(A)) ^ crc(B), where Z_n (the register after n zero bytes) is a linear map on 32 bits.
The `google-crc32c` package, when installed, is used instead (hardware CRC); nothing requires it.
"""

import numpy as np

POLY = 0x82F63B78  # reflected Castagnoli polynomial
MASK_DELTA = 0xA282EAD8
LANES = 1 << 16  # lanes walked side by side; a power of two, so they join in a balanced tree
SMALL = 1 << 12  # below this many bytes, a plain loop is quicker than setting up lanes


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(POLY), table >> 1).astype(np.uint32)
    return table


TABLE = _byte_table()
TABLE_LIST = TABLE.tolist()


def _walk(register: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """Advance each lane's register over its bytes: `columns` is [bytes, lanes]."""
    for column in columns:
        register = TABLE[(register ^ column) & 0xFF] ^ (register >> 8)
    return register


def _word_tables() -> tuple[np.ndarray, np.ndarray]:
    """Four bytes at once: the register after a little-endian word w is Z_4(register ^ w), looked up by halves."""
    halves = np.arange(1 << 16, dtype=np.uint32)
    return _walk(halves, np.zeros((4, 1), np.uint8)), _walk(halves << 16, np.zeros((4, 1), np.uint8))


LOW, HIGH = _word_tables()


def _walk_words(register: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """As `_walk`, over little-endian uint32 words: `columns` is [words, lanes]."""
    for column in columns:
        x = register ^ column
        register = LOW[x & 0xFFFF] ^ HIGH[x >> 16]
    return register


class ZeroBytes:
    """Z_n, the register after n zero bytes as a function of the register before: a 32x32 matrix over GF(2),
    kept as four 256-entry tables (one per input byte) so that applying it to an array is four look-ups."""

    def __init__(self, images: np.ndarray):
        self.images = images  # images[i] = Z_n(1 << i)
        bits = (np.arange(256)[:, None] >> np.arange(8)) & 1  # [256, 8]
        self.tables = [np.bitwise_xor.reduce(np.where(bits, images[8 * j:8 * j + 8], 0), axis=1).astype(np.uint32)
                       for j in range(4)]

    @classmethod
    def of_length(cls, n: int) -> "ZeroBytes":
        return cls(_walk(np.uint32(1) << np.arange(32, dtype=np.uint32), np.zeros((n, 32), np.uint8)))

    def __call__(self, x):
        x = np.asarray(x, dtype=np.uint32)
        t = self.tables
        return t[0][x & 0xFF] ^ t[1][(x >> 8) & 0xFF] ^ t[2][(x >> 16) & 0xFF] ^ t[3][x >> 24]

    def twice(self) -> "ZeroBytes":
        """Z_2n = Z_n after Z_n."""
        return ZeroBytes(self(self.images))


def _register_small(data: bytes, register: int = 0) -> int:
    for byte in data:
        register = TABLE_LIST[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


def _register_lanes(block: np.ndarray) -> int:
    """The register (started at 0) after `block` [lanes, length], lanes a power of two, length a multiple of 4."""
    lanes, length = block.shape
    words = np.ascontiguousarray(block).view("<u4")
    register = _walk_words(np.zeros(lanes, np.uint32), np.ascontiguousarray(words.T))
    shift = ZeroBytes.of_length(length)
    while len(register) > 1:  # join neighbours: crc(A + B) = Z_|B|(crc(A)) ^ crc(B)
        register = shift(register[0::2]) ^ register[1::2]
        shift = shift.twice()
    return int(register[0])


def _zero_bytes(n: int) -> ZeroBytes:
    """Z_n for any n, by squaring (log n steps)."""
    result, power = None, ZeroBytes.of_length(1)
    while n:
        if n & 1:
            result = power if result is None else ZeroBytes(power(result.images))
        n >>= 1
        if n:
            power = power.twice()
    return result


def crc32c_pure(data, chunk: int = 1 << 26) -> int:
    """CRC-32C of bytes-like or a uint8 array, in numpy, `chunk` bytes (rounded to whole lane words) at a time."""
    view = np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)
    n = len(view)
    if n < SMALL:
        return _register_small(bytes(view), 0xFFFFFFFF) ^ 0xFFFFFFFF
    # Leading zero bytes leave a register started at 0 at 0, so the first chunk is padded at the front to fill
    # whole lanes; later chunks are full. The standard start value 0xFFFFFFFF is added back at the end.
    row = 4 * LANES  # lanes walk whole words
    chunk = max(row, chunk // row * row)
    first = n % chunk or chunk
    padded = np.zeros(-(-first // row) * row, np.uint8)
    padded[len(padded) - first:] = view[:first]
    register = _register_lanes(padded.reshape(LANES, -1))
    shift_chunk = None
    for start in range(first, n, chunk):
        shift_chunk = shift_chunk or _zero_bytes(chunk)
        register = int(shift_chunk(register)) ^ _register_lanes(view[start:start + chunk].reshape(LANES, -1))
    return (int(_zero_bytes(n)(0xFFFFFFFF)) ^ register) ^ 0xFFFFFFFF


try:  # the optional fast path; the package falls back to slow pure Python where its C extension is missing
    import google_crc32c
    _extend = google_crc32c.extend if google_crc32c.implementation == "c" else None
except ImportError:  # pragma: no cover - depends on the environment
    _extend = None
FAST_CHUNK = 1 << 24  # the C function takes bytes only: copied a chunk at a time


def crc32c(data) -> int:
    """CRC-32C of bytes-like or a uint8 array (`google-crc32c` when installed, else numpy)."""
    if _extend is None:
        return crc32c_pure(data)
    view, crc = memoryview(data).cast("B"), 0
    for start in range(0, len(view), FAST_CHUNK):
        crc = _extend(crc, bytes(view[start:start + FAST_CHUNK]))
    return crc


def mask(crc: int) -> int:
    """The masked form TensorFlow and LevelDB store (a CRC of data holding CRCs is then not degenerate)."""
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rot = (masked - MASK_DELTA) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF
