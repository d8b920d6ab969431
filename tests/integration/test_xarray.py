"""xarray: open_dataset and engine "zarr_gpu" against xarray's own zarr engine."""

import subprocess
import sys

import dask
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarr_dask_gpu
from zarr_dask_gpu import ChunkDecodeError

from ..helpers import host


def _era5_like(path, fmt):
    rng = np.random.default_rng(0)
    time = pd.date_range("2020-01-01", periods=12, freq="6h")
    lat, lon = np.linspace(90, -90, 19), np.arange(0, 360, 15.0)
    t2m = (280 + 10 * rng.standard_normal((12, 19, 24))).astype("f4")
    t2m[0, :3, :3] = np.nan
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 metre temperature"}),
            "sp": (("time", "lat", "lon"), 1e5 + 500 * rng.standard_normal((12, 19, 24))),
            "mask": (("lat", "lon"), rng.integers(0, 2, (19, 24)).astype(bool)),
            "lead": (("time",), pd.to_timedelta(np.arange(12), "h")),
            "station": (("lat",), np.array([f"s{i}" for i in range(19)])),
        },
        coords={"time": time, "lat": lat, "lon": lon, "height": (("lat", "lon"), rng.random((19, 24)))},
        attrs={"title": "ERA5-like"},
    )
    ds.sp.encoding.update(dtype="i2", scale_factor=0.1, add_offset=1e5, _FillValue=-32768)
    ds.t2m.encoding.update(chunks=(4, 10, 24))
    ds.sp.encoding.update(chunks=(3, 19, 12))
    ds.to_zarr(path, mode="w", zarr_format=fmt, consolidated=True)
    return ds


@pytest.fixture(params=[2, 3])
def era5(tmp_path, request):
    path = tmp_path / "era5.zarr"
    _era5_like(path, request.param)
    return path


def _loaded(ds):
    return ds.map(lambda v: host(v.data) if not isinstance(v.data, np.ndarray) else v).load()


@pytest.mark.parametrize(
    "kwargs", [{}, {"mask_and_scale": False}, {"decode_times": False}, {"decode_cf": False}]
)
def test_parity_with_engine_zarr(era5, device, kwargs):
    ours = zarr_dask_gpu.open_dataset(era5, device=device, **kwargs)
    ref = xr.open_dataset(era5, engine="zarr", **kwargs)
    assert set(ours.coords) == set(ref.coords)
    for name, v in ours.data_vars.items():
        assert v.dtype == ref[name].dtype, name
    got = ours.compute()
    for name in ref.variables:
        np.testing.assert_array_equal(host(got[name].data), ref[name].values, err_msg=name)
    np.testing.assert_equal(got.attrs, ref.attrs)
    for name in ref.variables:
        np.testing.assert_equal(got[name].attrs, ref[name].attrs)


def test_data_variables_are_our_dask_arrays_and_coords_are_host_numpy(era5, device):
    with dask.config.set(scheduler="sync"):
        ds = zarr_dask_gpu.open_dataset(era5, device=device)
    t2m = ds.t2m.data
    assert isinstance(t2m, dask.array.Array) and t2m.name.startswith("from-zarr-gpu")
    expected = "cupy" if device == "gpu" else "numpy"
    assert type(t2m._meta).__module__.split(".")[0] == expected
    assert type(ds.sp.data._meta).__module__.split(".")[0] == expected  # after CF decoding too
    for c in ("time", "lat", "lon", "height"):  # indexes and small coordinates: numpy on the host
        assert isinstance(ds[c].data, np.ndarray), c
    assert ds.station.encoding["zarr_gpu"].startswith("read on the host")
    assert isinstance(ds.indexes["time"], pd.DatetimeIndex)


def test_chunks_forms(era5, device):
    ds = zarr_dask_gpu.open_dataset(era5, device=device, chunks={"time": 2})
    default = zarr_dask_gpu.from_zarr_gpu(era5 / "t2m", device=device).chunks
    assert ds.t2m.data.chunks[0] == (2,) * 6 and ds.t2m.data.chunks[1:] == default[1:]
    ds = zarr_dask_gpu.open_dataset(era5, device=device, chunks={"lat": -1, "time": 5})
    assert ds.sp.chunks[0] == (5, 5, 2)
    eager = zarr_dask_gpu.open_dataset(era5, device=device, chunks=None)
    assert not isinstance(eager.t2m.data, dask.array.Array)
    ref = xr.open_dataset(era5, engine="zarr")
    np.testing.assert_array_equal(host(eager.sp.data), ref.sp.values)


def test_engine_entry_point(era5, device):
    ds = xr.open_dataset(era5, engine="zarr_gpu", device=device, blocks={"time": 4})
    # xarray wraps backend variables (so ds.t2m.chunks is None) but .data is our dask array
    assert ds.t2m.data.name.startswith("from-zarr-gpu") and ds.t2m.data.chunks[0] == (4, 4, 4)
    ref = xr.open_dataset(era5, engine="zarr")
    np.testing.assert_array_equal(host(ds.t2m.data.compute()), ref.t2m.values)
    sel = ds.t2m.sel(lat=slice(60, -60)).mean("time")
    np.testing.assert_allclose(
        host(sel.data.compute()), ref.t2m.sel(lat=slice(60, -60)).mean("time").values, rtol=1e-5
    )


def _parts(tmp_path, n: int) -> list:
    """``n`` zarr stores of one variable, consecutive in time, the i-th filled with i."""
    paths = []
    for i in range(n):
        p = tmp_path / f"part{i}.zarr"
        xr.Dataset(
            {"v": (("time", "x"), np.full((4, 5), i, "f4"))},
            coords={"time": pd.date_range(f"2020-01-0{i + 1}", periods=4, freq="6h"), "x": np.arange(5)},
        ).to_zarr(p, mode="w")
        paths.append(p)
    return paths


def test_open_mfdataset(tmp_path, device):
    paths = _parts(tmp_path, 3)
    ds = xr.open_mfdataset(paths, engine="zarr_gpu", device=device, combine="by_coords")
    np.testing.assert_array_equal(host(ds.v.data.compute())[:, 0], np.repeat([0, 1, 2], 4))


def test_groups_and_drop_variables(tmp_path, device):
    path = tmp_path / "g.zarr"
    xr.Dataset({"a": (("x",), np.arange(6.0))}).to_zarr(path, group="inner/deeper", mode="w")
    ds = zarr_dask_gpu.open_dataset(path, group="inner/deeper", device=device)
    np.testing.assert_array_equal(host(ds.a.data.compute()), np.arange(6.0))
    assert "a" not in zarr_dask_gpu.open_dataset(
        path, group="inner/deeper", drop_variables="a", device=device
    )


def test_damaged_chunk_names_variable_and_key(era5, device):
    ds = zarr_dask_gpu.open_dataset(era5, device=device)
    fmt3 = (era5 / "t2m" / "zarr.json").exists()
    key = era5 / "t2m" / ("c/1/0/0" if fmt3 else "1.0.0")
    key.write_bytes(b"garbage!")
    with pytest.raises(ChunkDecodeError, match=r"t2m.*|.*t2m") as e:
        ds.t2m.compute()
    assert "t2m" in str(e.value) and e.value.key in ("c/1/0/0", "1.0.0")


def test_opening_computes_nothing(era5, device):
    class NoCompute:
        def __call__(self, *a, **k):
            raise AssertionError("computed while opening")

    for f in (era5 / "t2m").rglob("*"):
        if f.is_file() and "zarr" not in f.name and not f.name.startswith("."):
            f.write_bytes(b"garbage!")
    with dask.config.set(scheduler=NoCompute()):
        ds = zarr_dask_gpu.open_dataset(era5, device=device)
        ds.t2m.mean("time")


def test_backend_module_imports_without_gpu_libraries():
    code = (
        "import sys\n"
        "for m in ('cupy', 'kvikio', 'nvidia', 'nvidia.libnvcomp', 'dask_cuda'): sys.modules[m] = None\n"
        "import xarray as xr\n"
        "import zarr_dask_gpu.xarray.backend as b\n"
        "assert 'zarr_gpu' in xr.backends.list_engines()\n"
        "assert not any(m.startswith(('cupy', 'kvikio')) and sys.modules[m] for m in sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_open_datatree_of_nested_groups(tmp_path, device):
    path = tmp_path / "tree.zarr"
    xr.Dataset({"a": (("x",), np.arange(4.0))}).to_zarr(path, mode="w")
    xr.Dataset({"b": (("y",), np.arange(3, dtype="i4"))}).to_zarr(path, group="child", mode="a")
    xr.Dataset({"c": (("z",), np.ones(2, "f2"))}).to_zarr(path, group="child/grandchild", mode="a")
    ref = xr.open_datatree(path, engine="zarr")
    for tree in (
        zarr_dask_gpu.open_datatree(path, device=device),
        xr.open_datatree(path, engine="zarr_gpu", device=device),
    ):
        assert {n.path for n in tree.subtree} == {n.path for n in ref.subtree}
        np.testing.assert_array_equal(
            host(tree["child/grandchild"].c.data.compute()), ref["child/grandchild"].c.values
        )
        np.testing.assert_array_equal(host(tree["child"].b.data.compute()), ref["child"].b.values)


def test_unsigned_and_fill_values_decode_like_engine_zarr(tmp_path, device):
    """``_Unsigned`` int8 with a fill value, and a scaled int16 with two missing-value markers."""
    import zarr

    g = zarr.open_group(tmp_path / "u.zarr", mode="w", zarr_format=2)
    raw = np.arange(-128, 128, dtype="i1").reshape(16, 16)
    a = g.create_array("u", shape=raw.shape, chunks=(4, 16), dtype="i1", fill_value=-1)
    a[...] = raw
    a.attrs.update(_ARRAY_DIMENSIONS=["y", "x"], _Unsigned="true", _FillValue=-1)
    s = g.create_array("s", shape=raw.shape, chunks=(8, 8), dtype="i2", fill_value=-999)
    s[...] = raw.astype("i2") * 3
    s.attrs.update(_ARRAY_DIMENSIONS=["y", "x"], scale_factor=0.5, add_offset=10.0, missing_value=[-999, 6])
    zarr.consolidate_metadata(tmp_path / "u.zarr")
    ours = zarr_dask_gpu.open_dataset(tmp_path / "u.zarr", device=device)
    ref = xr.open_dataset(tmp_path / "u.zarr", engine="zarr")
    for name in ("u", "s"):
        assert ours[name].dtype == ref[name].dtype, name
        np.testing.assert_array_equal(host(ours[name].data.compute()), ref[name].values)
        assert ours[name].encoding.get("_FillValue", None) == ref[name].encoding.get("_FillValue", None)


def test_decoding_steps_run_on_the_device():
    """xarray's mask, scale and unsigned steps map to forms without np.array; others to a host copy."""
    import functools

    from xarray.coding import variables as cfv

    from zarr_dask_gpu.xarray.cf import _apply_mask, _as_dtype, _device_step, _on_host

    mask = _device_step(
        functools.partial(cfv._apply_mask, encoded_fill_values=[1], decoded_fill_value=np.nan, dtype="f4")
    )
    assert mask.func is _apply_mask
    np.testing.assert_array_equal(mask(np.array([1, 2], "i2")), np.array([np.nan, 2], "f4"))
    scale = functools.partial(cfv._scale_offset_decoding, scale_factor=2, add_offset=1, dtype="f8")
    assert _device_step(scale) is scale
    assert _device_step(functools.partial(np.asarray, dtype="u1")).func is _as_dtype
    assert _device_step(np.sqrt).func is _on_host


ENCODINGS = {
    "scale only": ("f4", {"dtype": "i2", "scale_factor": 0.01}),
    "offset only": ("f8", {"dtype": "i4", "add_offset": 1000.0}),
    "packed uint8 with fill": ("f4", {"dtype": "u1", "scale_factor": 0.5, "_FillValue": 255}),
    "float16 storage": ("f4", {"dtype": "f2"}),
    "int with fill": ("i4", {"_FillValue": -99}),
    "datetime data": ("M8[ns]", {"units": "hours since 2000-01-01"}),
    "timedelta data": ("m8[ns]", {"units": "minutes"}),
}


@pytest.mark.parametrize("case", list(ENCODINGS))
@pytest.mark.parametrize(
    "kwargs", [{}, {"mask_and_scale": False}, {"decode_times": False, "decode_timedelta": False}]
)
def test_cf_encodings_decode_like_engine_zarr(tmp_path, device, case, kwargs):
    dtype, encoding = ENCODINGS[case]
    rng = np.random.default_rng(1)
    if dtype.startswith("M8"):
        values = pd.date_range("2000-01-01", periods=40, freq="D").values.reshape(8, 5)
    elif dtype.startswith("m8"):
        values = pd.to_timedelta(rng.integers(0, 1000, 40), "min").values.reshape(8, 5)
    elif dtype.startswith("i"):
        values = rng.integers(-50, 50, (8, 5)).astype(dtype)
        values[0, 0] = -99
    else:
        values = np.round(rng.random((8, 5)) * 100, 1).astype(dtype)
        values[1, 1] = np.nan
    ds = xr.Dataset({"v": (("y", "x"), values)}, coords={"y": np.arange(8), "x": np.arange(5)})
    ds.v.encoding.update(chunks=(4, 5), **encoding)
    ds.to_zarr(tmp_path / "c.zarr", mode="w", consolidated=True)
    ref = xr.open_dataset(tmp_path / "c.zarr", engine="zarr", **kwargs)
    ours = zarr_dask_gpu.open_dataset(tmp_path / "c.zarr", device=device, **kwargs)
    assert ours.v.dtype == ref.v.dtype
    got = ours.v.data.compute()
    np.testing.assert_array_equal(host(got) if hasattr(got, "get") else np.asarray(got), ref.v.values)


def _reads_of(array) -> set[str]:
    """The kinds of task a dask array's graph holds (their key names less the token)."""
    return {(k[0] if isinstance(k, tuple) else k).rsplit("-", 1)[0] for k in dict(array.__dask_graph__())}


@pytest.mark.parametrize(
    "chunks,time_blocks",
    [({}, None), ({"time": 6}, (6, 6)), ({"time": 5, "lat": -1}, (5, 5, 2)), ("auto", None)],
)
def test_xarray_chunks_give_this_packages_tasks(era5, device, chunks, time_blocks):
    """xarray's own ``chunks=``: variables of this package's read tasks, one a block, with this
    package's blocks (cupy on the GPU) and meta, and no dask array nested in a task; values as
    engine="zarr" gives them."""
    ds = xr.open_dataset(era5, engine="zarr_gpu", device=device, chunks=chunks)
    ref = xr.open_dataset(era5, engine="zarr")
    expected = "cupy" if device == "gpu" else "numpy"
    for name in ("t2m", "sp"):  # sp: CF-decoded (scale, offset, fill) on the blocks
        data = ds[name].data
        assert isinstance(data, dask.array.Array)
        assert type(data._meta).__module__.split(".")[0] == expected, name
        reads = _reads_of(data)
        assert any(r.startswith("from-zarr-gpu") for r in reads), reads
        assert not any("open_dataset" in r or r.startswith("xarray-") for r in reads), reads  # no wrap
        block = data.blocks[(0,) * data.ndim].compute(scheduler="sync")
        assert type(block).__module__.split(".")[0] == expected
        np.testing.assert_array_equal(host(data.compute(scheduler="sync")), ref[name].values, err_msg=name)
    preferred = ds.t2m.encoding["preferred_chunks"]["time"]  # the engine's default blocks
    if time_blocks is not None:
        assert ds.t2m.data.chunks[0] == time_blocks
    elif chunks == {}:
        assert ds.t2m.data.chunks[0][0] == preferred
    else:  # dask's "auto" grows the preferred blocks
        assert ds.t2m.data.chunks[0][0] % preferred == 0
    mean = ds.t2m.mean("time").compute(scheduler="sync")
    np.testing.assert_allclose(host(mean.data), ref.t2m.mean("time").values, rtol=1e-5)


def test_xarray_chunks_after_an_operation_keep_it(era5):
    """A variable's re-blocking builds the read anew; after an operation it is dask's rechunk."""
    ds = xr.open_dataset(era5, engine="zarr_gpu", device="cpu", chunks={})
    ref = xr.open_dataset(era5, engine="zarr")
    doubled = (ds.t2m * 2).chunk({"time": 3})
    np.testing.assert_array_equal(doubled.values, ref.t2m.values * 2)
    again = ds.chunk({"time": 4})
    assert again.t2m.data.chunks[0] == (4, 4, 4)
    np.testing.assert_array_equal(again.t2m.values, ref.t2m.values)


def test_open_mfdataset_blocks_are_this_packages(tmp_path, device):
    ds = xr.open_mfdataset(_parts(tmp_path, 2), engine="zarr_gpu", device=device, combine="by_coords")
    expected = "cupy" if device == "gpu" else "numpy"
    assert type(ds.v.data._meta).__module__.split(".")[0] == expected
    assert any(r.startswith("from-zarr-gpu") for r in _reads_of(ds.v.data))


def test_chunks_none_stays_lazy_and_reads_what_it_needs(era5, monkeypatch):
    """``chunks`` unset: nothing is read on opening, and a selection reads only its chunks."""
    import zarr_dask_gpu.task as task

    ds = xr.open_dataset(era5, engine="zarr_gpu", device="cpu")
    regions = []
    real = task.read_regions
    monkeypatch.setattr(
        task, "read_regions", lambda boxes, *a, **k: regions.extend(boxes) or real(boxes, *a, **k)
    )
    ref = xr.open_dataset(era5, engine="zarr")
    got = ds.t2m.isel(time=slice(0, 2), lat=slice(0, 5)).values
    np.testing.assert_array_equal(got, ref.t2m.isel(time=slice(0, 2), lat=slice(0, 5)).values)
    assert regions and all(stop[0] - start[0] <= 4 for _, start, stop in regions)


@pytest.mark.parametrize("opened", [{}, {"chunks": {}}])
def test_reblocking_keeps_what_was_done_to_the_data(era5, opened):
    """Only a variable still holding its read is re-read for other blocks: one assigned to, loaded
    or changed in place is re-blocked by dask, with its values."""
    ref = xr.open_dataset(era5, engine="zarr", chunks={})

    def fresh():
        return xr.open_dataset(era5, engine="zarr_gpu", device="cpu", **opened)

    assert fresh().t2m.variable.chunk(time=6).chunks[0] == (6, 6)  # dimension sizes as keywords too
    ds = fresh()
    ds["t2m"] += 1
    np.testing.assert_array_equal(ds.chunk({"time": 4}).t2m.values, ref.t2m.values + 1)
    ds = fresh()
    ds["sp"][0, 0, 0] = 7.0
    assert float(ds.chunk({"time": 4}).sp[0, 0, 0]) == 7.0
    ds = fresh()
    np.testing.assert_array_equal(ds.load().chunk({"time": 4}).t2m.values, ref.t2m.values)
    np.testing.assert_array_equal(fresh().compute().chunk({"time": 4}).sp.values, ref.sp.values)


def test_xarray_auto_keeps_the_engines_blocks_where_dask_would_cut_them(era5, device):
    """Preferred blocks past dask's ``array.chunk-size``: dask's "auto" would shrink every axis and
    cut the stored chunks; the engine reads its own blocks instead, and still honours explicit sizes."""
    with dask.config.set({"array.chunk-size": "2KiB", "zarr_dask_gpu.block-size": "1MiB"}):
        ds = xr.open_dataset(era5, engine="zarr_gpu", device=device, chunks="auto")
        engines = zarr_dask_gpu.open_dataset(era5, device=device).t2m.data.chunks
        assert 4 * np.prod([c[0] for c in engines]) > 2048  # so dask's own "auto" would cut them
        assert ds.t2m.data.chunks == engines
        explicit = xr.open_dataset(era5, engine="zarr_gpu", device=device, chunks={"time": 2, "lat": 5})
        assert explicit.t2m.data.chunks[:2] == ((2,) * 6, (5, 5, 5, 4))
    ref = xr.open_dataset(era5, engine="zarr")
    np.testing.assert_array_equal(host(ds.t2m.data.compute(scheduler="sync")), ref.t2m.values)


def test_layouts_the_readers_cannot_take_are_read_by_zarr_python_as_engine_zarr_reads_them(tmp_path, device):
    """A rectilinear chunk grid: from_zarr_gpu refuses it with a typed error; the engine reads the
    variable with zarr-python on the host, lazily, as engine="zarr" does."""
    import zarr

    from zarr_dask_gpu.errors import UnsupportedLayoutError

    path = tmp_path / "r.zarr"
    with zarr.config.set({"array.rectilinear_chunks": True}):
        g = zarr.open_group(path, mode="w", zarr_format=3)
        a = g.create_array("v", shape=(60,), chunks=((10, 20, 30),), dtype="f4", dimension_names=("x",))
        a[:] = np.arange(60, dtype="f4")
        with pytest.raises(UnsupportedLayoutError, match="cannot read the zarr array"):
            zarr_dask_gpu.from_zarr_gpu(path / "v", device=device)
        got = xr.open_dataset(path, engine="zarr_gpu", device=device, consolidated=False)
        want = xr.open_dataset(path, engine="zarr", consolidated=False)
        assert got.v.encoding["zarr_gpu"].startswith("read on the host by zarr-python")
        xr.testing.assert_identical(got.load(), want.load())
