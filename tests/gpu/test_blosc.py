"""Blosc blocks on the GPU: unshuffled in place through shared memory."""

import numcodecs
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import from_zarr_gpu

from ..helpers import host, sample

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "dtype,shuffle,blocksize", [("i2", 2, 16384), ("f8", 1, 65536), ("f4", 2, 65536), ("u2", 1, 8192)]
)
def test_blosc_blocks_unshuffled_in_place_read_as_zarr_does(tmp_path, dtype, shuffle, blocksize):
    """Blosc blocks of 64 KiB or less are unshuffled in place through shared memory
    (``gpu/decoders/blosc.py``): small enough for racecheck (scripts/gpu_check.sh), and each block must
    read as zarr-python's."""
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(16, 8192),
        chunks=(4, 8192),
        dtype=dtype,
        zarr_format=2,
        compressors=numcodecs.Blosc("lz4", shuffle=shuffle, blocksize=blocksize),
    )
    a[...] = sample(a.shape, dtype, seed=blocksize)
    x = from_zarr_gpu(tmp_path / "a.zarr", device="gpu")
    np.testing.assert_array_equal(host(x.compute(scheduler="sync")), a[...])
