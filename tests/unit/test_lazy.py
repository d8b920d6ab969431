"""Building graphs reads no chunk data and computes nothing; slicing reads only what it needs."""

import time

import dask
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu

from ..helpers import host, sample


class _NoCompute:
    """A scheduler that fails on use (the check flox's raise_if_dask_computes makes)."""

    def __call__(self, dsk, keys, **kwargs):
        raise AssertionError("a dask graph was computed while building")


def _damage_all(path):
    for f in (path / "c").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")


def test_building_computes_nothing_and_reads_no_chunk(tmp_path, device):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(30, 30), chunks=(10, 10), dtype="f4")
    a[...] = sample(a.shape, "f4")
    _damage_all(tmp_path / "a.zarr")  # any chunk read would now raise
    with dask.config.set(scheduler=_NoCompute()):
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(10, 15), device=device)
        y = (x[3:17] * 2).sum(axis=0)
    assert y.shape == (30,)
    expected_meta = "cupy" if device == "gpu" else "numpy"
    assert type(x._meta).__module__.split(".")[0] == expected_meta
    with pytest.raises(ChunkDecodeError):
        x.compute()


def test_slicing_reads_only_needed_chunks(tmp_path, device):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(40, 40), chunks=(10, 10), dtype="i4")
    ref = sample(a.shape, "i4")
    a[...] = ref
    for f in (tmp_path / "a.zarr" / "c").rglob("*"):  # damage every chunk but c/1/2
        if f.is_file() and f.relative_to(tmp_path / "a.zarr" / "c").parts != ("1", "2"):
            f.write_bytes(b"garbage")
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(40, 40), device=device)  # one block of 16 chunks
    assert x.numblocks == (1, 1)
    np.testing.assert_array_equal(host(x[12:18, 21:29].compute()), ref[12:18, 21:29])
    np.testing.assert_array_equal(host(x[15, 20:30:3].compute()), ref[15, 20:30:3])


def test_huge_unwritten_store_opens_fast_and_reads_fill(tmp_path, device):
    zarr.create_array(
        tmp_path / "a.zarr", shape=(2**34, 1024), chunks=(1024, 1024), dtype="f4", fill_value=-1.0
    )
    t0 = time.perf_counter()
    x = from_zarr_gpu(tmp_path / "a.zarr", device=device)
    corner = x[-3:, -2:]
    assert time.perf_counter() - t0 < 5
    np.testing.assert_array_equal(host(corner.compute()), np.full((3, 2), -1.0, "f4"))
    assert time.perf_counter() - t0 < 10
