"""``zarr-dask-gpu bench``: reads of a sample store against the peers and the hardware ceilings.

On a GPU host, in one run: from_zarr_gpu(...).persist() in-process (1 to 16 threads) and on a
one-worker LocalCUDACluster; zarr-python with ``enable_gpu()``; dask.array.from_zarr + cupy.asarray;
tensorstore + cupy.asarray; and the ceilings: kvikio multi-threaded raw read of the chunk files, one
nvCOMP batched decode of the chunks already on the device, pinned host-to-device copy (the rows:
``rows.py``). Without a GPU: CPU mode against dask.array.from_zarr. The page cache is warm (files
read first) but for the cold rows.
"""

import argparse
import functools
import json
import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from . import ceilings, datasets, rows, stores
from .rows import Row
from .timing import (
    drop_cache,
    emptying,
    free_device,
    interleaved,
    persisting,
    settings,
    sync_device,
    task_result,
    timed,
    warm_cache,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", default=datasets.DEFAULT_PATH, help="the sample store (written if absent)")
    p.add_argument("--gib", type=float, default=4.0, help="its size (GPU); the CPU run uses an eighth")
    p.add_argument("--chunk-mib", type=int, default=8)
    p.add_argument("--threads", type=int, default=16, help="dask threads per worker (GPU)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cold-repeat", type=int, default=9, help="rounds of the cold rows (GPU)")
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"])
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--chart", default=None, help="draw a bar chart (PNG) here")
    p.add_argument(
        "--skip", default="", help="GPU rows to skip, comma-separated: " + ",".join(rows.SKIP_KEYS)
    )
    p.add_argument(
        "--datasets",
        default="A",
        help="datasets, comma-separated (the CPU run: at an eighth of their size): A (default), "
        + ", ".join(d for d in datasets.DATASETS if d != "A"),
    )


def main(args: argparse.Namespace) -> int:
    from ..device import resolve_device

    if args.chart:  # said before the run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise SystemExit("zarr-dask-gpu bench --chart needs matplotlib: pip install matplotlib") from None
    doc = run_gpu(args) if resolve_device(args.device) == "gpu" else run_cpu(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.chart:
        chart(doc, args.chart)
    return 0


def run_cpu(args: argparse.Namespace) -> dict[str, Any]:
    """The CPU run: dataset "cpu" (A's kind at an eighth of ``--gib``) and each other dataset of
    ``--datasets`` at an eighth of its GPU size, beside it; each read by this package in CPU mode,
    by dask's ``from_zarr`` and, for the other datasets, by zarr-python itself."""
    import dask.array as da

    from .. import from_zarr_gpu

    a = datasets.write(datasets.CPU.name, args.path, args.gib, args.chunk_mib)
    print(f"store {a.shape} {a.dtype} chunks {a.chunks}, {a.nbytes / 1e9:.2f} GB, {os.cpu_count()} CPUs")
    cases = {
        "from_zarr_gpu(device='cpu'), default blocks": lambda: from_zarr_gpu(a, device="cpu"),
        "from_zarr_gpu(device='cpu'), blocks = zarr chunks": lambda: from_zarr_gpu(
            a, device="cpu", chunks=a.chunks
        ),
        "dask.array.from_zarr": lambda: da.from_zarr(a),
    }
    results = _cpu_rows(cases, a.nbytes, args.repeat)
    for name in filter(None, args.datasets.split(",")):
        if name == "A":
            continue
        b = datasets.write(name, datasets.path(datasets.CPU.name, args.path), args.gib / 8, args.chunk_mib)
        print(f"{name}: {b.shape} chunks {b.chunks}, {b.nbytes / 1e9:.2f} GB")
        mine: dict[str, Callable[[], Any]] = {
            f"{name}: from_zarr_gpu(device='cpu'), default blocks": functools.partial(
                from_zarr_gpu, b, device="cpu"
            ),
            f"{name}: dask.array.from_zarr": functools.partial(da.from_zarr, b),
        }
        results |= _cpu_rows(mine, b.nbytes, args.repeat)
        t = timed(functools.partial(b.__getitem__, ...), args.repeat)
        results[f"{name}: zarr-python a[...]"] = b.nbytes / t / 1e9
        print(f"{name + ': zarr-python a[...]':52s} {b.nbytes / t / 1e9:6.2f} GB/s  ({t:.3f} s)")
    return {"results": results, "meta": {"device": "cpu", "cpus": os.cpu_count(), "nbytes": a.nbytes}}


def _cpu_rows(cases: dict[str, Callable[[], Any]], nbytes: int, repeat: int) -> dict[str, float]:
    """Each case's graph summed on dask's threads, its GB/s: the median of ``repeat`` passes after a
    warm-up, each pass's graph made anew (untimed)."""
    import dask

    results = {}
    for name, make in cases.items():
        graph: list[Any] = []

        def build(make: Callable[[], Any] = make, graph: list[Any] = graph) -> None:
            graph[:] = [make()]

        def compute(graph: list[Any] = graph) -> None:
            with dask.config.set(scheduler="threads"):
                graph[0].sum().compute()

        build()
        compute()  # warm-up
        t = timed(compute, repeat, build)
        results[name] = nbytes / t / 1e9
        print(f"{name:52s} {results[name]:6.2f} GB/s  ({t:.3f} s, median of {repeat})")
    return results


def chart(doc: dict[str, Any], path: str) -> None:
    """A horizontal bar chart of a run's GB/s rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = [
        (k, v)
        for k, v in doc["results"].items()
        if isinstance(v, float)
        and not k.startswith(("task_", "speedup", "fraction", "cold_fraction", rows.RELEASE_KEY))
    ]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(bars) + 1.2))

    def color(k: str) -> str:  # this package's rows green, ceilings grey, peers blue
        if "ceiling" in k or k == "cold_read_x_ratio":
            return "#999999"
        ours = "from_zarr_gpu" in k or k.split(": ")[-1].startswith("same,") or "package's" in k
        return "#76b900" if ours else "#4a90d9"

    colors = [color(k) for k, _ in bars]
    ax.barh([k for k, _ in bars][::-1], [v for _, v in bars][::-1], color=colors[::-1])
    ax.set_xlabel("GB/s decoded (ceilings: their own unit)")
    fig.suptitle(f"zarr-dask-gpu bench, {doc['meta'].get('device', '?')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the long row titles widen the figure
    plt.close(fig)


def other_staging() -> str:
    """The ``staging`` setting that is not the default, for a row beside the default's."""
    from .. import config

    return "host" if config.get("staging") == "device" else "device"


class Prepared:
    """A dataset as the run reads it: written, its files in the page cache, values checked."""

    def __init__(self, args: argparse.Namespace, name: str) -> None:
        from .. import from_zarr_gpu

        self.name = name
        self.array = datasets.write(name, args.path, args.gib, args.chunk_mib)
        self.path = datasets.path(name, args.path)
        self.files = datasets.chunk_files(self.path)
        self.stored = sum(os.path.getsize(f) for f in self.files)
        warm_cache(self.files)
        self.x = from_zarr_gpu(self.path, device="gpu")

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    def check(self, where: slice) -> None:
        """Its rows ``where`` through from_zarr_gpu equal zarr-python's CPU read of them."""
        got = self.x[where].compute(scheduler="threads").get()
        assert np.array_equal(got, self.array[where]), f"{self.name}: values differ"


class GpuRun:
    """One GPU run: its arguments, the datasets it has prepared, its results."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.results: dict[str, float] = {}
        self.staging = other_staging()
        self._datasets: dict[str, Prepared] = {}
        self._stores: dict[str, Any] = {}
        self._virtual: stores.Virtual | None = None

    def store(self, kind: str | None, name: str) -> Any:
        """Dataset ``name`` as ``from_zarr_gpu`` is given it: its path, or the store ``kind`` holding
        its bytes (made once a run, its values checked)."""
        d = self.dataset(name)
        if kind is None:
            return d.path
        if kind not in self._stores:
            from .. import from_zarr_gpu

            t0 = time.perf_counter()
            opened = self._stores[kind] = stores.opened(kind, d.path)
            rows_ = slice(0, d.array.chunks[0])
            got = from_zarr_gpu(opened, device="gpu")[rows_].compute(scheduler="threads").get()
            assert np.array_equal(got, d.array[rows_]), f"{kind}: values differ"
            print(f"{name} in {kind}: ready and checked in {time.perf_counter() - t0:.0f} s", flush=True)
        return self._stores[kind]

    def virtual(self) -> stores.Virtual:
        """Dataset V, written once beside A (half of --gib), its views checked against netCDF4."""
        if self._virtual is None:
            from .. import from_zarr_gpu

            t0 = time.perf_counter()
            v = self._virtual = stores.virtual(self.args.path + "-V.nc", int(self.args.gib * 2**30) // 2)
            want = v.values(4)
            for kind in ("kerchunk", "icechunk"):
                store, options = v.opened(kind)
                x = from_zarr_gpu(store, "t2m", storage_options=options, device="gpu")
                assert np.array_equal(x[:4].compute(scheduler="threads").get(), want), (
                    f"V {kind}: values differ"
                )
            warm_cache(v.files())
            print(
                f"dataset V: {v.shape} float32, {v.nbytes / 1e9:.2f} GB, "
                f"ready in {time.perf_counter() - t0:.0f} s"
            )
        return self._virtual

    def dataset(self, name: str) -> Prepared:
        if name not in self._datasets:
            d = self._datasets[name] = Prepared(self.args, name)
            a = d.array
            if name == "K":  # a row: K's rows are in every run, and its blocks are A's
                d.check(slice(0, 1))
            elif name != "A":
                d.check(slice(0, d.x.chunks[0][0]))
                print(
                    f"dataset {name}: {a.shape} chunks {a.chunks} shards {a.shards}, blocks {d.x.chunksize}"
                )
        return self._datasets[name]

    def record(self, name: str, seconds: float, nbytes: int) -> None:
        self.results[name] = nbytes / seconds / 1e9
        print(f"{name:58s} {self.results[name]:7.2f} GB/s  ({seconds:.3f} s)", flush=True)

    def title(self, row: Row, dataset: str) -> str:
        if dataset == rows.VIRTUAL_DATASET:
            return row.title(self.args.threads, self.staging, dataset)
        d = self.dataset(dataset)
        extra: dict[str, Any] = {"chunks": len(d.files)}
        if "{kvikio_threads}" in row.name:
            extra["kvikio_threads"] = ceilings.kvikio_threads()
        return row.title(self.args.threads, self.staging, dataset, **extra)

    def repeat(self, row: Row) -> int:
        if row.repeat is not None:
            return row.repeat
        return self.args.cold_repeat if row.kind in rows.COLD_KINDS else self.args.repeat


class Unavailable(Exception):
    """A peer this host lacks: its row is left out, and said so."""


# each kind's measure: (run, row, dataset) -> (seconds, bytes), bodies warmed first where the row's
# predecessors did so
def _ours(run: GpuRun, row: Row, name: str, empty: bool = True) -> tuple[float, int]:
    """Passes of ``from_zarr_gpu(...).persist()``, each from an empty pool (``empty``) or from the
    pool the pass before left; with ``empty``, the pool's release before each pass is timed apart."""
    from .. import from_zarr_gpu

    d = run.dataset(name)
    source = run.store(row.store, name)
    releases: list[float] = []
    with settings(row.resolved(run.staging)):  # some are read as the graph is made (block-size)
        body = persisting(from_zarr_gpu(source, device="gpu"), row.thread_count(run.args.threads))
        body()
        seconds = timed(body, run.repeat(row), emptying(releases) if empty else None)
    free_device()
    if releases:
        ms = statistics.median(releases) * 1e3
        run.results[f"{rows.RELEASE_KEY}, {run.title(row, name)}"] = ms
        print(f"  (cupy's pool emptied before each pass, untimed: {ms:.1f} ms)", flush=True)
    return seconds, d.nbytes


def _kept(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    return _ours(run, row, name, empty=False)


def _cluster(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    from dask_cuda import LocalCUDACluster
    from distributed import Client, wait

    d = run.dataset(name)
    with LocalCUDACluster(n_workers=1, threads_per_worker=run.args.threads) as cluster, Client(cluster) as c:

        def on_cluster() -> None:
            y = d.x.persist()
            wait(y)
            del y

        def empty() -> None:
            c.run(lambda: __import__("cupy").get_default_memory_pool().free_all_blocks())

        return timed(on_cluster, run.repeat(row), empty, warmup=1), d.nbytes


def zarr_read(path: str, on_gpu: bool) -> None:
    """The zarr-python peer: the whole array into device memory, with ``enable_gpu()`` or read on
    the host and copied."""
    import contextlib

    import cupy as cp
    import zarr

    with zarr.config.enable_gpu() if on_gpu else contextlib.nullcontext():
        g = cp.asarray(zarr.open_array(path, mode="r")[...])
    del g


def _peer(body: Callable[[str], None]) -> Callable[[GpuRun, Row, str], tuple[float, int]]:
    """A peer's passes, each from an empty pool, as this package's default row's."""

    def measure(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
        d = run.dataset(name)
        return timed(lambda: body(d.path), run.repeat(row), free_device), d.nbytes

    return measure


def _dask_peer(path: str) -> None:
    import cupy as cp
    import dask.array as da

    y = da.from_zarr(path).map_blocks(cp.asarray).persist(scheduler="threads")
    sync_device()
    del y


def _tensorstore_peer(path: str) -> None:
    import cupy as cp

    try:
        import tensorstore as ts
    except ImportError as e:
        raise Unavailable("tensorstore not installed: skipped") from e
    t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": path}}).result()
    g = cp.asarray(t.read().result())
    del g


def _gds_peer(path: str) -> None:
    import zarr
    from kvikio.zarr import GDSStore

    with zarr.config.enable_gpu():
        g = zarr.open_array(GDSStore(path), mode="r")[...]
        sync_device()
    del g


def _virtual(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    """Passes of ``from_zarr_gpu`` over a VirtualiZarr view of dataset V, each from an empty pool."""
    from .. import from_zarr_gpu

    v = run.virtual()
    store, options = v.opened(str(row.store))
    body = persisting(
        from_zarr_gpu(store, "t2m", storage_options=options, device="gpu"), row.thread_count(run.args.threads)
    )
    body()
    seconds = timed(body, run.repeat(row), free_device)
    free_device()
    return seconds, v.nbytes


def _virtual_peer(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    v = run.virtual()
    return timed(stores.xarray_zarr_peer(v), run.repeat(row), free_device), v.nbytes


def _read_ceiling(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    d = run.dataset(name)
    return timed(ceilings.raw_read(d.files), run.repeat(row)), d.stored


def _decode_ceiling(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    d = run.dataset(name)
    a = d.array
    chunk = math.prod(a.chunks) * a.dtype.itemsize  # every chunk file one whole chunk
    body, out = ceilings.zstd_decode(d.files, chunk, row.settings["zstd-decoder"])
    out.fill(0)
    body()
    first = out[:chunk].view(a.dtype).get().reshape(a.chunks)  # the files sorted: chunk 0 first
    assert np.array_equal(first, a[tuple(slice(0, c) for c in a.chunks)]), f"{row.name}: values differ"
    seconds = timed(body, run.repeat(row))
    del body, out
    free_device()
    return seconds, d.nbytes


def _stream_ceiling(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    """nvCOMP over the dataset's one-stream chunks (``ceiling-stream``), or the host path's decode of
    them alone (``host-decode``); the first chunk checked against zarr-python's read where the stream
    is the whole chain (else, as the shuffled datasets, the decode's own size check)."""
    d = run.dataset(name)
    a = d.array
    chunk = math.prod(a.chunks) * a.dtype.itemsize
    codec = datasets.DATASETS[name].codec
    if row.kind == "ceiling-stream":
        body, out = ceilings.stream_decode(d.files, chunk, codec)
    else:
        body, out = ceilings.host_decode(d.files, chunk, codec)
    body()
    if not a.filters and len(a.compressors) == 1:
        first = out[:chunk].get() if row.kind == "ceiling-stream" else out[:chunk]
        want = a[tuple(slice(0, c) for c in a.chunks)]
        assert np.array_equal(first.view(a.dtype).reshape(a.chunks), want), f"{row.name}: values differ"
    seconds = timed(body, run.repeat(row))
    del body, out
    free_device()
    return seconds, d.nbytes


def _blosc_ceiling(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    from ..codecs import compressions

    d = run.dataset(name)
    streams = compressions.inner(compressions.get(datasets.DATASETS[name].codec)).name  # a blosc row
    body, check = ceilings.blosc_decode(d.files, streams, row.settings["zstd-decoder"])
    body()
    check()
    seconds = timed(body, run.repeat(row))
    del body, check
    free_device()
    return seconds, d.nbytes


def _h2d_ceiling(run: GpuRun, row: Row, name: str) -> tuple[float, int]:
    body = ceilings.h2d(1 << 30)
    seconds = timed(body, run.repeat(row), warmup=1)
    del body
    free_device()
    return seconds, 1 << 30


MEASURES: dict[str, Callable[[GpuRun, Row, str], tuple[float, int]]] = {
    "persist": _ours,
    "kept": _kept,
    "cluster": _cluster,
    "zarr-gpu": _peer(lambda path: zarr_read(path, True)),
    "zarr-cpu": _peer(lambda path: zarr_read(path, False)),
    "dask": _peer(_dask_peer),
    "tensorstore": _peer(_tensorstore_peer),
    "gds": _peer(_gds_peer),
    "ceiling-read": _read_ceiling,
    "ceiling-decode": _decode_ceiling,
    "ceiling-blosc": _blosc_ceiling,
    "ceiling-stream": _stream_ceiling,
    "host-decode": _stream_ceiling,
    "ceiling-h2d": _h2d_ceiling,
    "virtual": _virtual,
    "virtual-peer": _virtual_peer,
}


def _cold(run: GpuRun, group: list[tuple[Row, str]]) -> None:
    """The cold rows of one dataset in turns, the page cache dropped before every pass (untimed)."""
    d = run.dataset(group[0][1])
    ceiling = {run.title(row, name) for row, name in group if row.kind == "cold-ceiling"}
    cold = _cold_seconds(run, d, group)
    free_device()
    for title, seconds in cold.items():
        run.record(title, seconds, d.stored if title in ceiling else d.nbytes)
    if rows.COLD_CEILING in ceiling:  # what a cold read of the chunks' bytes would deliver, decoded
        run.results["cold_read_x_ratio"] = run.results[rows.COLD_CEILING] * d.nbytes / d.stored


def _cold_seconds(run: GpuRun, d: Prepared, group: list[tuple[Row, str]]) -> dict[str, float]:
    from .. import from_zarr_gpu

    comp = ceilings.compressed(d.files)
    cold_read = persisting(from_zarr_gpu(d.path, device="gpu", name="bench-cold"), run.args.threads)

    def body(row: Row) -> Callable[[], None]:
        if row.kind == "cold-ceiling":
            return lambda: ceilings.kvikio_read_all(d.files, comp)
        values = row.resolved(run.staging)

        def with_settings() -> None:
            with settings(values):
                cold_read()

        return with_settings

    fns = {run.title(row, name): body(row) for row, name in group}

    def before() -> None:  # every pass from an empty pool and a cold page cache
        free_device()
        drop_cache(d.files)

    return interleaved(fns, run.repeat(group[0][0]), before)


def _steps(planned: list[tuple[Row, str]]) -> list[list[tuple[Row, str]]]:
    """The rows in order, each alone but the cold rows of a dataset, together."""
    steps: list[list[tuple[Row, str]]] = []
    for row, name in planned:
        cold = row.kind in rows.COLD_KINDS
        if cold and steps and steps[-1][0][0].kind in rows.COLD_KINDS and steps[-1][0][1] == name:
            steps[-1].append((row, name))
        else:
            steps.append([(row, name)])
    return steps


def _one_task(run: GpuRun, name: str = "A") -> None:
    """One task alone (dataset ``name``'s first block): its phases (``phases``) and its device
    memory at its peak, against its block's size, under each of ``rows.TASK_PEAKS``."""
    import cupy as cp

    from .. import phases

    d = run.dataset(name)
    pool = cp.get_default_memory_pool()
    first = d.x.blocks[(0,) * d.x.ndim]
    for _ in range(2):  # the first warms: kernel compiles, streams
        free_device()
        with phases.collect() as spans:
            t0 = time.perf_counter()
            z = task_result(first)
            t_task = time.perf_counter() - t0
        del z
    free_device()
    ms: dict[str, float] = defaultdict(float)
    for s in spans:
        ms[s.name] += s.seconds * 1e3

    for values in rows.TASK_PEAKS:  # from an empty pool: its high-water is the peak
        resolved = rows.resolved(values, run.staging)
        with settings(resolved):
            z = task_result(first)
        run.results[rows.task_peak_key(resolved, name)] = pool.total_bytes() / z.nbytes
        del z
        free_device()
    peak = run.results
    other = peak[rows.task_peak_key({"staging": run.staging}, name)]
    print(f"{name}: task peak with staging={run.staging}: {other:.2f}x block")
    nvcomp = peak[rows.task_peak_key({"zstd-decoder": "nvcomp"}, name)]
    print(f"{name}: task peak with nvCOMP: {nvcomp:.2f}x block")
    block = d.x.chunksize
    chunks = math.prod(-(-b // c) for b, c in zip(block, d.array.chunks, strict=True))
    phase = ", ".join(
        f"{k} {ms[k]:.0f}" for k in ("plan", "locate", "read", "check", "decode", "assemble", "wait")
    )
    print(
        f"{name}: one task ({chunks} chunks, {math.prod(block) * d.array.dtype.itemsize / 2**20:.0f} MiB): "
        f"whole task {t_task * 1e3:.0f} ms, phases (ms) {phase}; peak device memory "
        f"(staging, block, scratch: pool high-water) {peak[rows.task_peak_key({}, name)]:.2f}x block"
    )


def choices(args: argparse.Namespace) -> tuple[list[str], set[str]]:
    """``--datasets`` and ``--skip`` as lists, every name checked."""
    names = list(filter(None, args.datasets.split(",")))
    skip = set(filter(None, args.skip.split(",")))
    if unknown := [n for n in names if n not in datasets.DATASETS]:
        raise SystemExit(f"unknown datasets {unknown}: {', '.join(datasets.DATASETS)}")
    if unknown := sorted(skip - set(rows.SKIP_KEYS)):
        raise SystemExit(f"unknown --skip keys {unknown}: {', '.join(rows.SKIP_KEYS)}")
    return names, skip


def measure(run: GpuRun, names: list[str], skip: set[str]) -> None:
    """Every row of the table for datasets ``names`` but ``skip``'s, in order, into ``run.results``;
    then the ratios between rows."""
    for step in _steps(list(rows.plan(names, skip, datasets.DATASETS))):
        row, name = step[0]
        if row.kind in rows.COLD_KINDS:
            _cold(run, step)
            continue
        title = run.title(row, name)
        try:
            seconds, nbytes = MEASURES[row.kind](run, row, name)
        except Unavailable as e:
            print(e, flush=True)
            continue
        except Exception as e:
            if not row.may_fail:
                raise
            print(f"{title} failed: {e}", flush=True)
            free_device()
            continue
        run.record(title, seconds, nbytes)

    results = run.results
    default = rows.Row(rows.DEFAULT).title(run.args.threads, run.staging)
    ratio = results[default] / results.get(rows.ZARR_GPU, float("nan"))
    print(f"from_zarr_gpu in-process / zarr-python enable_gpu(): {ratio:.1f}x")
    results["speedup_vs_zarr_enable_gpu"] = ratio
    ceiling = next((v for k, v in results.items() if k.startswith("ceiling: nvCOMP")), float("nan"))
    results["fraction_of_nvcomp_ceiling"] = results[default] / ceiling
    print(
        f"from_zarr_gpu in-process / the nvCOMP decode ceiling: {results['fraction_of_nvcomp_ceiling']:.2f}"
    )
    for name in names:  # each other dataset over its own nvCOMP ceiling (zstd chunks or blosc streams)
        ours = results.get(f"{name}: {default}")
        own = next((v for k, v in results.items() if k.startswith(f"{name}: ceiling: nvCOMP")), None)
        if name != "A" and ours is not None and own is not None:
            results[f"fraction_of_nvcomp_ceiling, {name}"] = ours / own
            print(f"{name}: from_zarr_gpu in-process / its nvCOMP ceiling: {ours / own:.2f}")
    for kind, what in rows.STORE_TITLES.items():  # each store over the path, in the same run
        title = rows.Row(rows.STORE_ROW.format(store=what)).title(run.args.threads, run.staging)
        if title in results:
            results[f"fraction_of_path, {kind}"] = results[title] / results[default]
            print(f"A in {what} / A's path: {results[f'fraction_of_path, {kind}']:.2f}")
    peer = results.get(rows.VIRTUAL_PEER)
    for view in ("kerchunk references", "an Icechunk repository of virtual chunks"):
        title = rows.Row(rows.VIRTUAL.format(view=view)).title(run.args.threads, run.staging)
        if peer and title in results:
            results[f"speedup_vs_xarray_zarr, V, {view}"] = results[title] / peer
            print(f"V through {view} / xr.open_dataset(engine='zarr'): {results[title] / peer:.2f}x")
    if "cold_read_x_ratio" in results:
        cold = results[rows.Row(rows.COLD_DEFAULT).title(run.args.threads, run.staging)]
        results["cold_fraction"] = cold / results["cold_read_x_ratio"]
        print(f"cold from_zarr_gpu / (cold raw read rate x ratio): {results['cold_fraction']:.2f}")


def run_gpu(args: argparse.Namespace) -> dict[str, Any]:
    names, skip = choices(args)

    import cupy as cp
    import dask
    import zarr

    import zarr_dask_gpu

    from ..gpu.runtime import setup

    setup.configure()  # kvikio's threads for the ceilings as for the pipeline's reads
    t0 = time.perf_counter()
    run = GpuRun(args)
    d = run.dataset("A")
    a = d.array
    print(
        f"dataset {a.shape} {a.dtype} chunks {a.chunks}: {d.nbytes / 1e9:.2f} GB, "
        f"{len(d.files)} chunks, ratio {d.nbytes / d.stored:.2f}, ready in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    # correctness first: a slab against zarr-python's CPU read
    d.check(slice(a.shape[0] // 2, a.shape[0] // 2 + 3 * a.chunks[0]))
    print(f"values equal zarr-python's on a slab; dask blocks {d.x.chunksize}, {d.x.npartitions} tasks")
    for name in ["A", *(n for n in names if n in rows.TASK_PEAK_DATASETS and n != "A")]:
        _one_task(run, name)
    measure(run, names, skip)
    meta = {
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "nbytes": d.nbytes,
        "stored": d.stored,
        "chunks": len(d.files),
        "version": zarr_dask_gpu.__version__,
        "dask": dask.__version__,
        "zarr": zarr.__version__,
        "cpus": os.cpu_count(),
        "args": {k: v for k, v in vars(args).items() if k != "func"},
    }
    return {"results": run.results, "meta": meta}
