"""quantize.py: bit for bit sentence-transformers' quantize_embeddings."""

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.inference.quantize import (PRECISIONS, dequantize, hamming, quantize, ranges_of, unpack,
                                          width)

st_quantization = pytest.importorskip("sentence_transformers.util.quantization")


@pytest.fixture(scope="module")
def floats():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(200, 37)).astype(np.float32)
    values[3] = 0.0  # a zero vector, and zeros inside vectors: not above 0, so bit 0
    values[5, :10] = 0.0
    return values / np.linalg.norm(values, axis=1, keepdims=True).clip(1e-12)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_equal_to_sentence_transformers_with_own_ranges(floats, precision):
    ours, theirs = quantize(floats, precision), st_quantization.quantize_embeddings(floats, precision)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert np.array_equal(ours, theirs)
    assert ours.shape[1] == width(precision, 37)


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_equal_to_sentence_transformers_with_calibration_and_ranges(floats, precision):
    calibration = np.random.default_rng(1).normal(scale=0.2, size=(50, 37)).astype(np.float32)
    theirs = st_quantization.quantize_embeddings(floats, precision, calibration_embeddings=calibration)
    assert np.array_equal(quantize(floats, precision, ranges_of(calibration)), theirs)
    ranges = np.stack([np.full(37, -0.3), np.full(37, 0.3)]).astype(np.float32)
    theirs = st_quantization.quantize_embeddings(floats, precision, ranges=ranges)
    assert np.array_equal(quantize(floats, precision, ranges), theirs)
    # float64 inputs quantize as sentence-transformers does them too
    assert np.array_equal(quantize(floats.astype(np.float64), precision, ranges),
                          st_quantization.quantize_embeddings(floats.astype(np.float64), precision, ranges=ranges))


def test_dequantize_and_unpack_give_back_the_scale(floats):
    ranges = ranges_of(floats)
    for precision in ("int8", "uint8"):
        back = dequantize(quantize(floats, precision, ranges), precision, ranges)
        steps = (ranges[1] - ranges[0]) / 255
        assert np.all(back <= floats + 1e-6) and np.all(floats - back <= steps + 1e-6)
    for precision in ("binary", "ubinary"):
        assert np.array_equal(unpack(quantize(floats, precision), precision, 37), (floats > 0).astype(np.float32))


def test_hamming_counts_differing_bits(floats):
    for precision in ("binary", "ubinary"):
        bits = quantize(floats, precision)
        expected = ((floats > 0) != (floats[7] > 0)).sum(1)
        assert np.array_equal(hamming(bits[7], bits, precision), expected)


def test_bad_precision_and_ranges_are_refused(floats):
    with pytest.raises(BertforgeError, match="choose one of float32, int8"):
        quantize(floats, "int4")
    with pytest.raises(BertforgeError, match="at least 2 embeddings"):
        quantize(floats[:1], "int8")
    with pytest.raises(BertforgeError, match="must be floats"):
        quantize(quantize(floats, "int8"), "int8")
