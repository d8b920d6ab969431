"""netCDF4/HDF5 files made readable as zarr by VirtualiZarr: kerchunk references and an Icechunk
repository of virtual chunks, read through every door; netCDF4's own read is the oracle."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from zarr_dask_gpu import StoreError, from_zarr_gpu
from zarr_dask_gpu.bench.stores import virtual_dataset, virtual_repository
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.storage.units import Source

from ..helpers import host

netCDF4 = pytest.importorskip("netCDF4")
pytest.importorskip("virtualizarr")
pytest.importorskip("kerchunk")

FILL = -999.0


def write_netcdf(path, seed=0):
    """A netCDF4 file: ``t2m`` (zlib level 4 with shuffle, 2 x 25 x 40 chunks) written whole but its
    last time steps masked; ``sparse`` with most of its chunks never written (HDF5 allocates none)."""
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", 8)
        ds.createDimension("y", 50)
        ds.createDimension("x", 40)
        time = ds.createVariable("time", "i4", ("time",))
        time[:] = np.arange(8)
        time.units = "days since 2000-01-01"
        t2m = ds.createVariable(
            "t2m",
            "f4",
            ("time", "y", "x"),
            zlib=True,
            shuffle=True,
            complevel=4,
            chunksizes=(2, 25, 40),
            fill_value=FILL,
        )
        t2m[:] = (rng.random((8, 50, 40)) * 40 + 250).astype("f4")
        t2m[6:] = np.ma.masked
        t2m.units = "K"
        sparse = ds.createVariable(
            "sparse",
            "f4",
            ("time", "y", "x"),
            zlib=True,
            shuffle=True,
            chunksizes=(2, 25, 40),
            fill_value=FILL,
        )
        sparse[2:4, :25] = rng.random((2, 25, 40)).astype("f4")
    return path


def stored(path, name):
    """netCDF4's read of a variable's stored values (no masking or scaling)."""
    with netCDF4.Dataset(path) as ds:
        var = ds[name]
        var.set_auto_maskandscale(False)
        return np.asarray(var[:])


@pytest.fixture(scope="module")
def netcdf(tmp_path_factory):
    return write_netcdf(tmp_path_factory.mktemp("nc") / "era.nc")


@pytest.fixture(scope="module")
def references(netcdf):
    return virtual_dataset(netcdf).vz.to_kerchunk(format="dict")


def icechunk_repository(netcdf, where, authorize=True):
    pytest.importorskip("icechunk")
    return virtual_repository(virtual_dataset(str(netcdf)), str(netcdf.parent), str(where), authorize)


@pytest.fixture(scope="module")
def virtual_icechunk(netcdf, tmp_path_factory):
    return icechunk_repository(netcdf, tmp_path_factory.mktemp("ic") / "repo")


def _kinds(references, virtual_icechunk):
    yield "kerchunk", ("reference://", {"fo": references})
    yield "icechunk", (virtual_icechunk, None)


@pytest.mark.parametrize("name", ["t2m", "sparse"])
def test_virtual_chunks_read_as_netcdf4_reads_them(netcdf, references, virtual_icechunk, name, device):
    want = stored(netcdf, name)
    for kind, (store, options) in _kinds(references, virtual_icechunk):
        x = from_zarr_gpu(store, name, storage_options=options, device=device)
        np.testing.assert_array_equal(host(x.compute()), want, err_msg=kind)
        np.testing.assert_array_equal(host(x[1:7, 10:40, ::3].compute()), want[1:7, 10:40, ::3], err_msg=kind)


def test_virtual_chunks_are_read_from_the_file_directly(netcdf, references, virtual_icechunk):
    for kind, (store, options) in _kinds(references, virtual_icechunk):
        info = open_array_info(store, "sparse", storage_options=options)
        ranges = info.store.whole([info.chunk_path(c) for c in [(0, 0, 0), (1, 0, 0), (1, 1, 0)]])
        absent, written, never = ranges
        assert absent is None and never is None, kind  # chunks HDF5 never allocated
        assert written.source is Source.FILE and written.path == str(netcdf), kind


def test_xarray_over_virtual_references_equals_the_netcdf_file(netcdf, references, virtual_icechunk, device):
    want = xr.open_dataset(netcdf, engine="netcdf4")
    for kind, (store, options) in _kinds(references, virtual_icechunk):
        got = xr.open_dataset(
            store, engine="zarr_gpu", device=device, storage_options=options, consolidated=False
        )
        for name in ("t2m", "sparse"):
            np.testing.assert_array_equal(host(got[name].data.compute()), want[name].values, err_msg=kind)
        assert got.t2m.attrs["units"] == "K" and np.isnan(host(got.t2m.data[6].compute())).all()
        np.testing.assert_array_equal(got.time.values, want.time.values)


def test_an_unauthorized_virtual_container_is_refused_not_read(netcdf, tmp_path):
    """Icechunk lists virtual chunks of containers it was not allowed to read: they are never read
    directly, and never filled."""
    store = icechunk_repository(netcdf, tmp_path / "repo", authorize=False)
    with pytest.raises(StoreError, match="authorize"):
        from_zarr_gpu(store, "t2m", device="cpu").compute()


def test_references_to_a_file_that_is_gone_raise(netcdf, tmp_path):
    moved = shutil.copy(netcdf, tmp_path / "copy.nc")
    refs = virtual_dataset(moved).vz.to_kerchunk(format="dict")
    os.remove(moved)
    with pytest.raises(StoreError, match=r"copy\.nc"):
        from_zarr_gpu("reference://", "t2m", storage_options={"fo": refs}, device="cpu").compute()


def test_icechunk_vouches_for_each_session_and_each_change_of_a_file(netcdf, tmp_path):
    """A file Icechunk read from in one session is not read directly for another session it refuses,
    nor once the file changed since it was referenced."""
    copy = shutil.copy(netcdf, tmp_path / "era.nc")
    store = icechunk_repository(Path(copy), tmp_path / "repo")
    want = stored(copy, "t2m")
    np.testing.assert_array_equal(from_zarr_gpu(store, "t2m", device="cpu").compute(), want)
    refused = icechunk_repository(Path(copy), tmp_path / "repo2", authorize=False)
    with pytest.raises(StoreError, match="authorize"):
        from_zarr_gpu(refused, "t2m", device="cpu").compute()
    with open(copy, "r+b") as f:  # the same bytes, a new modification time
        data = f.read()
        f.seek(0)
        f.write(data)
    os.utime(copy, ns=(os.stat(copy).st_atime_ns, os.stat(copy).st_mtime_ns + 10**9))
    with pytest.raises(StoreError):
        from_zarr_gpu(store, "t2m", device="cpu").compute()
