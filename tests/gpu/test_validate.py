"""The structure-check kernels (``gpu/decoders/validate.py``): their verdicts against the host's checks,
and the warp-per-stream lz4 walk against one thread's."""

import numcodecs
import numpy as np
import pytest

from zarr_dask_gpu.codecs import compressions

from ..helpers import lz4_fuzz, sample

pytestmark = pytest.mark.gpu

CODECS = {"zstd": numcodecs.Zstd(1), "lz4": numcodecs.LZ4()}  # the kinds validate.py checks


@pytest.mark.parametrize("compression", list(CODECS))
def test_kernel_agrees_with_host_checks(compression):
    import cupy as cp

    from zarr_dask_gpu.gpu.decoders.validate import check_batch

    codec = CODECS[compression]
    raw = sample((1 << 16,), "f4").tobytes()
    good = bytes(codec.encode(raw))
    rng = np.random.default_rng(2)
    frames = {
        "good": good,
        "half": good[: len(good) // 2],
        "empty": b"",
        "garbage": rng.integers(0, 256, len(good), dtype=np.uint8).tobytes(),
        "larger": bytes(codec.encode(raw * 2)),
        "smaller": bytes(codec.encode(raw[: len(raw) // 2])),
    }
    names = list(frames)
    offsets = np.cumsum([0, *[len(frames[k]) for k in names]])[:-1]
    buf = cp.asarray(np.frombuffer(b"".join(frames.values()) + b"\0", dtype=np.uint8))
    sizes = np.array([len(frames[k]) for k in names])
    bad = dict(check_batch(buf, offsets, sizes, compression, len(raw)))
    assert check_batch(buf, offsets[:1], sizes[:1], compression, len(raw)) == []
    for i, k in enumerate(names):
        host_says = compressions.check(compression, frames[k], len(raw))
        if k == "good":
            assert i not in bad and host_says is None
        elif host_says is not None:  # what the host can tell from headers, the kernel tells too
            assert i in bad, (k, host_says)
    if compression in ("zstd", "lz4"):
        assert set(bad) == {1, 2, 3, 4, 5}  # every damaged frame is stopped before nvCOMP


def test_the_warps_lz4_walk_agrees_with_one_threads():
    """``validate_lz4`` (a warp per stream: lanes parse candidate sequences, shuffles chain them)
    gives every fuzzed stream the status of one thread walking it sequence by sequence."""
    import cupy as cp

    from zarr_dask_gpu.gpu.decoders import validate

    frames = lz4_fuzz(7, 3000)
    sizes = np.array([len(f) for f, _ in frames], dtype=np.int64)
    offsets = np.cumsum([0, *(sizes + np.arange(len(frames)) % 16)])[:-1]  # misaligned starts too
    host_buf = np.zeros(int(offsets[-1] + sizes[-1] + 16), dtype=np.uint8)
    for (f, _), at in zip(frames, offsets, strict=True):
        host_buf[at : at + len(f)] = np.frombuffer(f, np.uint8)
    buf, expected = cp.asarray(host_buf), np.array([n for _, n in frames], dtype=np.int64)
    n = len(frames)
    status = {}
    for name, threads in (("validate", n), ("validate_lz4", 32 * n)):  # a thread or a warp each
        st, claimed = cp.full(n, -1, dtype=np.int32), cp.empty(n, dtype=np.int64)
        args = (buf, cp.asarray(offsets), cp.asarray(sizes), np.int32(5), cp.asarray(expected))
        validate._kernel(name)(((threads + 127) // 128,), (128,), (*args, st, claimed, np.int32(n)))
        status[name] = st.get()
    np.testing.assert_array_equal(status["validate_lz4"], status["validate"])
    assert set(status["validate"].tolist()) == {0, 1, 3}
    assert (status["validate"][::3] == 0).all()  # the sound third
