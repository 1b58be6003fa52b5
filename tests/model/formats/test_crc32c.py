"""CRC-32C: the published check values, the lane-parallel walk against a byte-at-a-time loop, and the mask."""

import numpy as np
import pytest

from bertforge.model.formats import crc32c as c


def bytewise(data: bytes) -> int:
    """The textbook bit-at-a-time definition (reflected Castagnoli polynomial, start and final xor ~0)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (c.POLY if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("data,expected", [
    (b"123456789", 0xE3069283),  # the CRC catalogue's check value
    (bytes(32), 0x8A9136AA),  # RFC 3720 (iSCSI), B.4
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
    (b"", 0),
])
def test_published_values(data, expected):
    assert c.crc32c_pure(data) == expected
    assert c.crc32c(data) == expected


@pytest.mark.parametrize("n", [c.SMALL - 1, c.SMALL, c.LANES + 1, 4 * c.LANES, 4 * c.LANES + 1, 1_000_003])
def test_lanes_agree_with_the_byte_loop(n):
    data = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8).tobytes()
    expected = c._register_small(data, 0xFFFFFFFF) ^ 0xFFFFFFFF
    assert c.crc32c_pure(data) == expected
    assert c.crc32c_pure(data, chunk=4 * c.LANES) == expected  # several chunks joined, the first one short
    assert c.crc32c_pure(np.frombuffer(data, np.uint8)) == expected


def test_loop_agrees_with_the_definition():
    data = np.random.default_rng(1).integers(0, 256, 300, dtype=np.uint8).tobytes()
    assert c._register_small(data, 0xFFFFFFFF) ^ 0xFFFFFFFF == bytewise(data)


def test_mask_round_trip():
    values = [0, 1, 0xFFFFFFFF, 0xE3069283, 0x80000000]
    assert [c.unmask(c.mask(v)) for v in values] == values
    assert c.mask(0) == c.MASK_DELTA


def test_fast_path_agrees_when_installed():
    if c._extend is None:
        pytest.skip("google-crc32c (the optional fast path) is not installed with its C extension")
    data = np.random.default_rng(2).integers(0, 256, 3 * c.FAST_CHUNK + 5, dtype=np.uint8)
    assert c.crc32c(data) == c.crc32c_pure(data)
    assert c.crc32c(memoryview(data.tobytes())[7:]) == c.crc32c_pure(data[7:])
