"""Helpers the test modules import: a host copy of an array, sample values of any dtype, fuzzed lz4
blocks."""

import numpy as np
from numcodecs import LZ4


def host(x):
    """A numpy copy of a numpy or cupy array."""
    return x.get() if hasattr(x, "get") else np.asarray(x)


def sample(shape, dtype, seed=0):
    """Random values of any numeric dtype, with some repetition so codecs compress them."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    if dtype.kind == "f":
        return np.round(rng.standard_normal(shape) * 100, 1).astype(dtype)
    real = np.round(rng.standard_normal(shape), 2)
    return (real + 1j * np.round(rng.standard_normal(shape), 2)).astype(dtype)


def lz4_fuzz(seed: int, cases: int) -> list[tuple[bytes, int]]:
    """Bare lz4 blocks (blosc's streams) of D-like, run-heavy and random data, a third of them as
    written, a third cut short, a third with bytes overwritten; each with its decoded size."""
    rng = np.random.default_rng(seed)
    out = []
    for t in range(cases):
        size = int(rng.integers(1, 40000))
        kind = t % 4
        if kind == 0:  # a byte of shuffled noisy floats: short matches, few literals (dataset D)
            raw = np.round(rng.standard_normal(size), 1).astype("f4").tobytes()[1::4]
        elif kind == 1:
            raw = np.cumsum(rng.integers(-2, 3, size)).astype(np.int8).tobytes()
        elif kind == 2:  # long runs: 255-continued match lengths
            raw = bytes(size) if t % 8 == 2 else b"\xff" * size
        else:
            raw = rng.integers(0, 256, size, dtype=np.uint8).tobytes()  # literals only
        frame = bytearray(LZ4().encode(raw)[4:])
        if t % 3 == 1:
            frame = frame[: int(rng.integers(0, len(frame)))]
        elif t % 3 == 2:
            for _ in range(int(rng.integers(1, 5))):
                at = int(rng.integers(0, len(frame)))
                frame[at : at + 4] = rng.integers(0, 256, 4, dtype=np.uint8).tobytes()[: len(frame) - at]
        out.append((bytes(frame), len(raw)))
    return out
