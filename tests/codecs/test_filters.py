"""numcodecs filters undone with array operations: equal to numcodecs' own decode."""

import numcodecs
import numpy as np
import pytest

from zarr_dask_gpu.codecs import filters

from ..helpers import sample

CASES = [
    ("i4", [numcodecs.Delta(dtype="i4")]),
    ("i8", [numcodecs.Delta(dtype="i8", astype="i2")]),
    ("u2", [numcodecs.Delta(dtype="u2")]),
    ("f8", [numcodecs.FixedScaleOffset(offset=100, scale=10, dtype="f8", astype="u1")]),
    ("f4", [numcodecs.FixedScaleOffset(offset=-3.5, scale=1000, dtype="f4", astype="i4")]),
    ("f4", [numcodecs.Quantize(digits=2, dtype="f4")]),
    ("f8", [numcodecs.Quantize(digits=3, dtype="f8", astype="f4")]),
    ("f4", [numcodecs.BitRound(keepbits=8)]),
    ("f8", [numcodecs.AsType(encode_dtype="f4", decode_dtype="f8")]),
    ("f8", [numcodecs.Shuffle(elementsize=8)]),
    ("i2", [numcodecs.Shuffle(elementsize=2)]),
    ("f8", [numcodecs.Quantize(digits=1, dtype="f8", astype="f4"), numcodecs.Shuffle(elementsize=4)]),
    ("i4", [numcodecs.Delta(dtype="i4"), numcodecs.Shuffle(elementsize=4)]),
]


@pytest.mark.parametrize("dtype,chain", CASES, ids=lambda c: str(c))
def test_decode_equals_numcodecs(dtype, chain):
    data = sample(1001, dtype)
    if dtype.startswith("f"):
        data = data / 7
    enc = data
    for f in chain:
        enc = f.encode(enc)
    ref = np.frombuffer(bytes(enc), np.uint8)
    for f in reversed(chain):
        ref = f.decode(ref)
    ref = np.asarray(ref).view(dtype)
    configs = [f.get_config() for f in chain]
    raw = np.frombuffer(bytes(enc), np.uint8)
    assert raw.size == data.size * filters.encoded_itemsize(configs, np.dtype(dtype))
    np.testing.assert_array_equal(filters.decode(np, raw, configs, np.dtype(dtype)), ref)


def test_unsupported():
    assert filters.unsupported([{"id": "categorize"}]) is not None
    assert filters.unsupported([{"id": "delta", "dtype": ">i4"}]) is not None
    assert filters.unsupported([numcodecs.Delta(dtype="i4").get_config()]) is None
