"""xarray's front doors timed against each other: a reduction over time of an ERA5-like variable.

    python3 benchmarks/xarray_bench.py [--path /tmp/era5.zarr] [--times 240] [--device gpu]

Writes (once) a zarr v3 group with ``t2m`` float32 (time, 721, 1440), zstd, 4 time steps a chunk
(``--times 240``: 1.0 GB), then times ``ds.t2m.mean("time")`` on dask's threaded scheduler, warm
page cache, best of ``--repeat`` after one untimed pass, for each way of opening it:
``zarr_dask_gpu.open_dataset``; ``xr.open_dataset(engine="zarr_gpu")`` with ``chunks={}``,
``chunks={"time": 48}`` and ``chunks="auto"``; ``xr.open_mfdataset(engine="zarr_gpu")``; and
xarray's own ``engine="zarr"`` with ``chunks={}`` (numpy blocks read by zarr-python). Each row says
the blocks' and meta's array type and checks the mean against zarr-python's.
"""

import argparse
import json
from pathlib import Path

import dask
import numpy as np
import xarray as xr

import zarr_dask_gpu
from zarr_dask_gpu.bench.timing import timed


def write(path: Path, times: int) -> None:
    import zarr

    if (path / "zarr.json").exists() and zarr.open_group(path, mode="r").attrs.get("times") == times:
        return
    g = zarr.open_group(path, mode="w", attributes={"times": times})
    shape = (times, 721, 1440)
    codec = zarr.codecs.ZstdCodec(level=3)
    t2m = g.create_array(
        "t2m",
        shape=shape,
        chunks=(4, 721, 1440),
        dtype="float32",
        compressors=codec,
        dimension_names=("time", "lat", "lon"),
    )
    lat = np.linspace(-90, 90, 721, dtype="float32")[:, None]
    lon = np.linspace(0, 360, 1440, endpoint=False, dtype="float32")[None, :]
    rng = np.random.default_rng(0)
    for t0 in range(0, times, 4):
        t = np.arange(t0, min(t0 + 4, times), dtype="float32")[:, None, None]
        field = 280 + 20 * np.cos(np.radians(lat)) + 5 * np.sin(np.radians(lon) + t / 24)
        noise = rng.normal(0, 0.5, (len(t), 721, 1440)).astype("float32")
        t2m[t0 : t0 + len(t)] = np.round(field + noise, 2)
    for name, values in {"time": np.arange(times, dtype="int64"), "lat": lat[:, 0], "lon": lon[0]}.items():
        a = g.create_array(name, shape=values.shape, dtype=values.dtype, dimension_names=(name,))
        a[:] = values
    zarr.consolidate_metadata(path)


def kind(x) -> str:
    return type(x).__module__.split(".")[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", default="/tmp/era5-xarray.zarr")
    p.add_argument("--times", type=int, default=240)
    p.add_argument("--device", default="gpu")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args()
    path = Path(args.path)
    write(path, args.times)
    nbytes = args.times * 721 * 1440 * 4
    dev = {"device": args.device}
    openers = {
        "zarr_dask_gpu.open_dataset": lambda: zarr_dask_gpu.open_dataset(path, **dev),
        'xr.open_dataset(engine="zarr_gpu", chunks={})': lambda: xr.open_dataset(
            path, engine="zarr_gpu", chunks={}, **dev
        ),
        'xr.open_dataset(engine="zarr_gpu", chunks={"time": 48})': lambda: xr.open_dataset(
            path, engine="zarr_gpu", chunks={"time": 48}, **dev
        ),
        'xr.open_dataset(engine="zarr_gpu", chunks="auto")': lambda: xr.open_dataset(
            path, engine="zarr_gpu", chunks="auto", **dev
        ),
        'xr.open_mfdataset([path], engine="zarr_gpu")': lambda: xr.open_mfdataset(
            [path], engine="zarr_gpu", **dev
        ),
        'xr.open_dataset(engine="zarr", chunks={})': lambda: xr.open_dataset(path, engine="zarr", chunks={}),
    }
    expected = xr.open_dataset(path, engine="zarr").t2m.mean("time").values
    rows = []
    with dask.config.set(scheduler="threads"):
        for label, opener in openers.items():
            last: dict = {}

            def once(opener=opener, last=last) -> None:  # opened and reduced, as a user would
                last["ds"] = ds = opener()
                last["mean"] = ds.t2m.mean("time").compute()

            best = timed(once, args.repeat, warmup=1, pick=min)
            ds, mean = last["ds"], last["mean"]
            data = ds.t2m.data
            values = mean.data.get() if hasattr(mean.data, "get") else mean.data
            np.testing.assert_allclose(values, expected, rtol=1e-5, err_msg=label)
            row = {
                "open": label,
                "seconds": round(best, 4),
                "gb_per_s": round(nbytes / best / 1e9, 2),
                "meta": kind(data._meta),
                "block": kind(data.blocks[0].compute()),
                "block_shape": [c[0] for c in data.chunks],
                "result": kind(mean.data),
            }
            rows.append(row)
            print(
                f"{label:58s} {best:7.3f} s {row['gb_per_s']:6.2f} GB/s  meta={row['meta']} "
                f"block={row['block']} {tuple(row['block_shape'])} result={row['result']}",
                flush=True,
            )
    base = rows[0]["seconds"]
    for row in rows[1:]:
        print(f"{row['open']:58s} {row['seconds'] / base:5.2f}x the time of zarr_dask_gpu.open_dataset")
    if args.json:
        Path(args.json).write_text(json.dumps({"nbytes": nbytes, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
