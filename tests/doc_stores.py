"""The stores the examples of README.md and docs/ read, small, in one folder: what a reader of the docs
has in its place. ``python -m tests.doc_stores DIR`` writes them there."""

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import xarray


def era5(times: int = 8, start: str = "2024-01-01") -> "xarray.Dataset":
    """Hourly fields on a 0.75-degree grid, latitude from north to south as ERA5 has it."""
    import pandas as pd
    import xarray as xr

    rng = np.random.default_rng(0)
    lat = np.linspace(90, -90, 241, dtype=np.float32)
    lon = np.linspace(0, 359.25, 480, dtype=np.float32)
    shape = (times, lat.size, lon.size)
    base = (278 + 20 * np.cos(np.deg2rad(lat)))[None, :, None].astype(np.float32)
    fields = {
        "t2m": base + rng.standard_normal(shape, dtype=np.float32).round(1),
        "u10": rng.standard_normal(shape, dtype=np.float32).round(1),
        "target": base + 1 + rng.standard_normal(shape, dtype=np.float32).round(1),
    }
    dims = ("time", "latitude", "longitude")
    coords = {"time": pd.date_range(start, periods=times, freq="h"), "latitude": lat, "longitude": lon}
    return xr.Dataset({k: (dims, v) for k, v in fields.items()}, coords=coords)


def write(root: Path) -> None:
    """era5.zarr (t2m, u10, target), era5-2023.zarr and era5-2024.zarr (one time range each), data.zarr
    (one 2-d array), hierarchy.zarr (``group/array``), demo.zarr (the demo's store), era5-repo (an
    Icechunk repository of era5's t2m) and era5.nc (netCDF4, shuffle + zlib)."""
    import icechunk
    import xarray as xr
    import zarr

    from zarr_dask_gpu.testing.sample_stores import write_sample

    root.mkdir(parents=True, exist_ok=True)
    ds = era5()
    ds.chunk({"time": 2}).to_zarr(root / "era5.zarr", mode="w")
    for year in (2023, 2024):
        era5(4, f"{year}-06-01").chunk({"time": 2}).to_zarr(root / f"era5-{year}.zarr", mode="w")
    data = zarr.create_array(root / "data.zarr", shape=(16384, 64), chunks=(4096, 64), dtype="f4")
    data[...] = np.arange(16384 * 64, dtype=np.float32).reshape(16384, 64) % 97
    group = xr.Dataset({"array": (("y", "x"), np.ones((512, 256), np.float32))})
    xr.DataTree.from_dict({"/": xr.Dataset(), "/group": group}).to_zarr(root / "hierarchy.zarr", mode="w")
    write_sample(root / "demo.zarr", 16 << 20)
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(root / "era5-repo")))
    session = repo.writable_session("main")
    ds[["t2m"]].chunk({"time": 2}).to_zarr(session.store, mode="w", consolidated=False)
    session.commit("era5's t2m")
    encoding = {"t2m": {"zlib": True, "shuffle": True, "complevel": 4, "chunksizes": (2, 241, 480)}}
    ds[["t2m"]].to_netcdf(root / "era5.nc", engine="netcdf4", encoding=encoding)


if __name__ == "__main__":
    write(Path(sys.argv[1]))
