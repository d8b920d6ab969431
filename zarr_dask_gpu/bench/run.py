"""``zarr-dask-gpu bench``: reads of a sample store against the peers and the hardware ceilings.

On a GPU host, in one run: from_zarr_gpu(...).persist() in-process (1 to 16 threads) and on a
one-worker LocalCUDACluster; zarr-python with ``enable_gpu()``; dask.array.from_zarr + cupy.asarray;
tensorstore + cupy.asarray; and the ceilings: kvikio multi-threaded raw read of the chunk files, one
nvCOMP batched decode of the chunks already on the device, pinned host-to-device copy. Without a GPU:
CPU mode against dask.array.from_zarr. The page cache is warm (files read first).
"""

import argparse
import functools
import json
import os
import statistics
import time
from typing import Any

import numpy as np

from .sample import write_sample


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--path", default="/tmp/bench-a.zarr", help="the sample store (written if absent)")
    p.add_argument("--gib", type=float, default=4.0, help="its size (GPU); the CPU run uses an eighth")
    p.add_argument("--chunk-mib", type=int, default=8)
    p.add_argument("--threads", type=int, default=16, help="dask threads per worker (GPU)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cold-repeat", type=int, default=9, help="rounds of the cold rows (GPU)")
    p.add_argument("--device", default="auto", choices=["auto", "gpu", "cpu"])
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--chart", default=None, help="draw a bar chart (PNG) here")
    p.add_argument(
        "--skip",
        default="",
        help="GPU rows to skip, comma-separated: cluster,zarr-gpu,dask,tensorstore,gds,cold,checksum",
    )
    p.add_argument("--datasets", default="A", help="GPU datasets, comma-separated: A (default), B, C, D")


def main(args: argparse.Namespace) -> int:
    from .device import resolve_device

    doc = run_gpu(args) if resolve_device(args.device) == "gpu" else run_cpu(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
    if args.chart:
        chart(doc, args.chart)
    return 0


def run_cpu(args: argparse.Namespace) -> dict[str, Any]:
    import dask
    import dask.array as da

    from . import from_zarr_gpu

    a = write_sample(args.path + "-cpu", int(args.gib * 2**30) // 8, args.chunk_mib << 20)
    print(f"store {a.shape} {a.dtype} chunks {a.chunks}, {a.nbytes / 1e9:.2f} GB, {os.cpu_count()} CPUs")
    cases = {
        "from_zarr_gpu(device='cpu'), default blocks": lambda: from_zarr_gpu(a, device="cpu"),
        "from_zarr_gpu(device='cpu'), blocks = zarr chunks": lambda: from_zarr_gpu(
            a, device="cpu", chunks=a.chunks
        ),
        "dask.array.from_zarr": lambda: da.from_zarr(a),
    }
    results = {}
    for name, make in cases.items():
        times = []
        for _ in range(args.repeat + 1):
            x = make()
            t0 = time.perf_counter()
            with dask.config.set(scheduler="threads"):
                x.sum().compute()
            times.append(time.perf_counter() - t0)
        t = statistics.median(times[1:])
        results[name] = a.nbytes / t / 1e9
        print(f"{name:52s} {results[name]:6.2f} GB/s  ({t:.3f} s, median of {args.repeat})")
    return {"results": results, "meta": {"device": "cpu", "cpus": os.cpu_count(), "nbytes": a.nbytes}}


def chart(doc: dict[str, Any], path: str) -> None:
    """A horizontal bar chart of a run's GB/s rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [
        (k, v)
        for k, v in doc["results"].items()
        if isinstance(v, float) and not k.startswith(("task_", "speedup", "fraction", "cold_fraction"))
    ]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))

    def color(k: str) -> str:  # this package's rows green, ceilings grey, peers blue
        if "ceiling" in k or k == "cold_read_x_ratio":
            return "#999999"
        ours = "from_zarr_gpu" in k or k.split(": ")[-1].startswith("same,") or "package's" in k
        return "#76b900" if ours else "#4a90d9"

    colors = [color(k) for k, _ in rows]
    ax.barh([k for k, _ in rows][::-1], [v for _, v in rows][::-1], color=colors[::-1])
    ax.set_xlabel("GB/s decoded (ceilings: their own unit)")
    fig.suptitle(f"zarr-dask-gpu bench, {doc['meta'].get('device', '?')}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def kvikio_read_all(files: list[str], into: Any) -> None:
    """The raw read ceiling: every file at once by kvikio's threads into the device buffer ``into``,
    each at a 16-byte aligned offset (``into`` holds their rounded-up sizes)."""
    import kvikio

    sizes = [os.path.getsize(f) for f in files]
    offs = np.cumsum([0, *[(s + 15) // 16 * 16 for s in sizes]])
    handles = [kvikio.CuFile(f, "r") for f in files]
    futs = [h.pread(into[o : o + s], s, 0) for h, o, s in zip(handles, offs[:-1], sizes, strict=True)]
    for fu in futs:
        fu.get()
    for h in handles:
        h.close()


def warm_cache(files: list[str]) -> None:
    """Bring the files into the page cache, written to disk first: a dataset this run just wrote
    would otherwise be written back while the warm rows are timed, by the kernel's flusher threads."""
    for f in files:
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
            while fh.read(64 << 20):
                pass


def drop_cache(files: list[str]) -> None:
    """Evict the files' pages from the page cache (no root needed; written first, as only clean
    pages are evicted: a dataset the same run wrote may not be on disk yet)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# the performance issue's datasets: A (4 GiB, 8 MiB zstd chunks), B small chunks, C sharded, D zarr v2
# with blosc lz4 and byte shuffle
def _dataset(args: argparse.Namespace, name: str) -> Any:
    import numcodecs

    gib = int(args.gib * 2**30)
    if name == "A":
        return write_sample(args.path, gib, args.chunk_mib << 20)
    if name == "B":
        return write_sample(f"{args.path}-B", gib // 4, 256 << 10)
    if name == "C":
        return write_sample(f"{args.path}-C", gib, 1 << 20, shard_bytes=256 << 20)
    if name == "D":
        blosc = numcodecs.Blosc("lz4", shuffle=numcodecs.Blosc.SHUFFLE)
        return write_sample(f"{args.path}-D", gib, 8 << 20, zarr_format=2, compressors=blosc)
    if name == "K":  # A's data and chunks, each zstd frame with its content checksum (XXH64)
        from zarr.codecs import ZstdCodec

        return write_sample(f"{args.path}-K", gib, args.chunk_mib << 20, compressors=ZstdCodec(checksum=True))
    raise ValueError(f"unknown dataset {name!r}: A, B, C, D or K")


def _settings(settings: dict[str, Any]) -> Any:
    import dask

    return dask.config.set({f"zarr_dask_gpu.{k}": v for k, v in settings.items()})


def _label(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())


def _other_staging() -> str:
    """The ``staging`` setting that is not the default, for a row beside the default's."""
    from . import config

    return "host" if config.get("staging") == "device" else "device"


def extra_dataset(
    args: argparse.Namespace, name: str, results: dict[str, float], row: Any, free: Any
) -> None:
    """from_zarr_gpu and zarr-python enable_gpu() on dataset ``name``, warm, values checked."""
    import cupy as cp

    from . import from_zarr_gpu

    a = _dataset(args, name)
    path = str(a.store_path.store.root)
    warm_cache(chunk_files(path))
    x = from_zarr_gpu(path, device="gpu")
    rows = slice(0, x.chunks[0][0])
    assert np.array_equal(x[rows].compute(scheduler="threads").get(), a[rows]), f"{name}: values differ"
    print(f"dataset {name}: {a.shape} chunks {a.chunks} shards {a.shards}, blocks {x.chunksize}", flush=True)

    ours = persisting(x, args.threads, free)
    ours()
    row(
        f"{name}: from_zarr_gpu().persist(), in-process, {args.threads} threads",
        timed(ours, args.repeat),
        a.nbytes,
    )
    kept = persisting(x, args.threads, cp.cuda.Device().synchronize)
    row(f"{name}: same, cupy's pool kept between passes", timed(kept, args.repeat), a.nbytes)
    free()
    zstd = name in ("B", "C")  # D is blosc
    for settings in (  # host-read-below 0: kvikio preads only
        *([{"zstd-decoder": "nvcomp"}] if zstd else []),  # nvCOMP's decoder, for trusted data only
        {"host-read-below": 0},
        {"coalesce-tasks": 0},  # joined calls of every task then decoding, as before coalesce-tasks
        {"coalesce-wait": None},  # a task's call waits for its partner's however long, as before
        {"staging": _other_staging()},
        {"coalesce-decodes": False},  # each task's nvCOMP calls its own, as before coalescing
    ):
        with _settings(settings):
            ours()
            row(f"{name}: same, {_label(settings)}", timed(ours, args.repeat), a.nbytes)

    for peer, on_gpu in (("zarr-python enable_gpu()", True), ("zarr-python (CPU) + cupy.asarray", False)):
        try:
            row(f"{name}: {peer}", timed(lambda on_gpu=on_gpu: zarr_read(path, on_gpu, free), 1), a.nbytes)
        except Exception as e:  # a peer that cannot read the dataset is a result, not a crash
            print(f"{name}: {peer} failed: {e}", flush=True)


def zarr_read(path: str, on_gpu: bool, free: Any) -> None:
    """The zarr-python peer: the whole array into device memory, with ``enable_gpu()`` or read on
    the host and copied."""
    import contextlib

    import cupy as cp
    import zarr

    with zarr.config.enable_gpu() if on_gpu else contextlib.nullcontext():
        g = cp.asarray(zarr.open_array(path, mode="r")[...])
    cp.cuda.Device().synchronize()
    del g
    free()


def persisting(arr: Any, threads: int, free: Any) -> Any:
    """A body to time: ``arr`` persisted on ``threads`` threads, waited for, dropped, memory freed."""
    import cupy as cp

    def run() -> None:
        y = arr.persist(scheduler="threads", num_workers=threads)
        cp.cuda.Device().synchronize()
        del y
        free()

    return run


def timed(fn, repeat: int, before: Any = None) -> float:
    """The median seconds of ``repeat`` calls of ``fn``, each after an untimed ``before()``."""
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Any], repeat: int, before: Any) -> dict[str, float]:
    """The median seconds of each of ``fns`` over ``repeat`` rounds, each round calling every one
    in turn after an untimed ``before()``: a storage whose speed drifts over the run (cold reads)
    then drifts under all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            times[name].append(timed(fn, 1, before))
    return {name: statistics.median(t) for name, t in times.items()}


def chunk_files(path: str) -> list[str]:
    """Every chunk (or shard) file of an array: all files but its metadata documents."""
    out = []
    for root, _, files in os.walk(path):
        out += [os.path.join(root, f) for f in files if not f.startswith(".z") and f != "zarr.json"]
    return sorted(out)


def run_gpu(args: argparse.Namespace) -> dict[str, Any]:
    skip = set(filter(None, args.skip.split(",")))

    import cupy as cp
    import dask
    import dask.array as da
    import zarr

    import zarr_dask_gpu
    from zarr_dask_gpu import from_zarr_gpu

    t0 = time.perf_counter()
    _dataset(args, "A")
    files = chunk_files(args.path)
    stored = sum(os.path.getsize(f) for f in files)
    warm_cache(files)
    a = zarr.open_array(args.path, mode="r")
    nbytes = a.nbytes
    print(
        f"dataset {a.shape} {a.dtype} chunks {a.chunks}: {nbytes / 1e9:.2f} GB, "
        f"{len(files)} chunks, ratio {nbytes / stored:.2f}, ready in {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    results: dict[str, float] = {}
    pool = cp.get_default_memory_pool()

    def row(name: str, seconds: float, nb: int = nbytes) -> None:
        results[name] = nb / seconds / 1e9
        print(f"{name:58s} {results[name]:7.2f} GB/s  ({seconds:.3f} s)", flush=True)

    def free() -> None:
        cp.cuda.Device().synchronize()
        pool.free_all_blocks()

    # correctness first: a slab against zarr-python's CPU read
    x = from_zarr_gpu(args.path, device="gpu")
    rows = slice(a.shape[0] // 2, a.shape[0] // 2 + 3 * a.chunks[0])
    assert np.array_equal(x[rows].compute(scheduler="threads").get(), a[rows]), "values differ"
    print(f"values equal zarr-python's on a slab; dask blocks {x.chunksize}, {x.npartitions} tasks")

    # one task alone: its stages and its device memory, against its block's size
    from .gpu.backend import GpuBackend
    from .metadata import open_array_info
    from .plan import block_pieces
    from .storage import locate
    from .task import read_region

    info, backend = open_array_info(args.path), GpuBackend()
    stop = tuple(c[0] for c in x.chunks)
    pieces = block_pieces((0,) * x.ndim, stop, info.chunks)

    def one_decode() -> None:
        with backend.context():
            backend.decode(info, pieces, cp.empty(stop, dtype=info.dtype))

    free()
    one_decode()  # warm: kernel compile, stream creation
    for _ in range(2):
        t0 = time.perf_counter()
        backend._reader.read(locate(info, [p.coords for p in pieces]), align=16)
        t_read = time.perf_counter() - t0
        t0 = time.perf_counter()
        one_decode()
        t_decode = time.perf_counter() - t0
        t0 = time.perf_counter()
        z = x.blocks[0].compute(scheduler="sync")
        t_task = time.perf_counter() - t0
        del z
        free()

    def task_peak(settings: dict[str, Any]) -> float:  # from an empty pool: its high-water is the peak
        with _settings(settings):
            z = read_region(info, (0,) * x.ndim, stop, "gpu", False)
        peak = pool.total_bytes() / z.nbytes
        del z
        free()
        return peak

    other = _other_staging()
    for settings in ({"staging": other}, {"zstd-decoder": "nvcomp"}, {}):
        label = _label(settings)
        results["task_peak_over_block" + (f", {label}" if label else "")] = task_peak(settings)
    print(f"task peak with staging={other}: {results[f'task_peak_over_block, staging={other}']:.2f}x block")
    print(f"task peak with nvCOMP: {results['task_peak_over_block, zstd-decoder=nvcomp']:.2f}x block")
    print(
        f"one task ({len(pieces)} chunks, {np.prod(stop) * info.dtype.itemsize / 2**20:.0f} MiB): "
        f"kvikio read {t_read * 1e3:.0f} ms, "
        f"read+check+decode {t_decode * 1e3:.0f} ms, whole task {t_task * 1e3:.0f} ms; peak device memory "
        f"(staging, block, scratch: pool high-water) {results['task_peak_over_block']:.2f}x block"
    )

    ours = persisting(x, args.threads, free)
    ours()  # warm-up: kernels, codecs, streams
    default_row = f"from_zarr_gpu().persist(), in-process, {args.threads} threads"
    row(default_row, timed(ours, args.repeat))
    # every row empties cupy's pool after each pass, so a pass allocates all it uses; a worker that
    # keeps its pool (or an RMM pool) does not: the same read with the pool's memory kept
    kept = persisting(x, args.threads, cp.cuda.Device().synchronize)
    row("same, cupy's pool kept between passes", timed(kept, args.repeat))
    free()
    # the techniques, each switched off in turn (docs/performance.md)
    for settings in (
        {"zstd-decoder": "nvcomp"},  # a frame per thread block, as before this package's zstd kernels
        {"decode-call-bytes": "128MiB"},
        {"decode-call-bytes": "64MiB"},
        {"read-slots": 0},
        {"read-slots": 4, "coalesce-tasks": 4},  # the defaults before 1 GiB blocks
        {"coalesce-tasks": 0},
        {"coalesce-wait": None},
        {"staging": _other_staging()},
        {"coalesce-decodes": False},  # each task's nvCOMP calls its own, as before coalescing
    ):
        with _settings(settings):
            ours()
            row(f"from_zarr_gpu().persist(), {args.threads} threads, {_label(settings)}", timed(ours, 2))
    # other block sizes: more, smaller tasks than threads (reads of later tasks overlap decodes of
    # earlier ones; 256 MiB was the default before 1 GiB beat it: 25.3 vs 22.1 GB/s on A), fewer and
    # larger calls (2 and 4 GiB ask whether one call of all 512 chunks nears the decode ceiling),
    # and bounded memory: a task's nvCOMP scratch about 1.5x its block, kept busy by twice the
    # threads; or 0.76x with 1 GiB blocks in calls of 32 chunks, which keeps as many chunks in flight
    # as the default once the array gives every thread a 1 GiB block (--gib 16 and more)
    for block, threads, calls in (
        ("128MiB", args.threads, None),
        ("256MiB", args.threads, None),
        ("2GiB", args.threads, None),
        ("4GiB", args.threads, None),
        ("128MiB", 2 * args.threads, "64MiB"),
        ("1GiB", args.threads, "256MiB"),
    ):
        with _settings({"block-size": block, "gpu-min-blocks": 1, "decode-call-bytes": calls}):
            ours_other = persisting(from_zarr_gpu(args.path, device="gpu"), threads, free)
            ours_other()
            row(
                f"from_zarr_gpu().persist(), {threads} thr, {block} blocks, calls {calls or 'whole'}",
                timed(ours_other, 2),
            )
    if "checksum" not in skip:  # the cost of verifying zstd content checksums on the device
        k = _dataset(args, "K")
        kpath = str(k.store_path.store.root)
        warm_cache(chunk_files(kpath))
        xk = from_zarr_gpu(kpath, device="gpu")
        assert np.array_equal(xk[:1].compute(scheduler="threads").get(), k[:1]), "K: values differ"
        for settings in ({}, {"verify-checksums": False}):
            with _settings(settings):
                body = persisting(xk, args.threads, free)
                body()
                label = _label(settings) or "verify-checksums=True"
                row(f"K (A with zstd checksums): persist(), {label}", timed(body, args.repeat), k.nbytes)
    for threads in (1, 4, 8):
        ours_n = persisting(x, threads, free)
        ours_n()
        row(f"from_zarr_gpu().persist(), in-process, {threads} threads", timed(ours_n, 2))

    if "cluster" not in skip:
        from dask_cuda import LocalCUDACluster
        from distributed import Client, wait

        with LocalCUDACluster(n_workers=1, threads_per_worker=args.threads) as cluster, Client(cluster) as c:

            def on_cluster() -> None:
                y = x.persist()
                wait(y)
                del y
                c.run(lambda: __import__("cupy").get_default_memory_pool().free_all_blocks())

            on_cluster()
            row(
                f"from_zarr_gpu().persist(), LocalCUDACluster 1 worker, {args.threads} thr",
                timed(on_cluster, args.repeat),
            )

    if "zarr-gpu" not in skip:
        row("zarr-python enable_gpu()", timed(lambda: zarr_read(args.path, True, free), 1))

    if "dask" not in skip:

        def dask_peer() -> None:
            y = da.from_zarr(args.path).map_blocks(cp.asarray).persist(scheduler="threads")
            cp.cuda.Device().synchronize()
            del y
            free()

        row("dask.array.from_zarr + cupy.asarray (threads)", timed(dask_peer, 1))

    if "tensorstore" not in skip:
        try:
            import tensorstore as ts

            def ts_peer() -> None:
                t = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": args.path}}).result()
                g = cp.asarray(t.read().result())
                cp.cuda.Device().synchronize()
                del g
                free()

            row("tensorstore + cupy.asarray", timed(ts_peer, 1))
        except ImportError:
            print("tensorstore not installed: skipped")

    if "gds" not in skip:
        from kvikio.zarr import GDSStore

        def gds_peer() -> None:
            with zarr.config.enable_gpu():
                g = zarr.open_array(GDSStore(args.path), mode="r")[...]
            cp.cuda.Device().synchronize()
            del g
            free()

        row("kvikio.zarr.GDSStore + zarr enable_gpu()", timed(gds_peer, 1))

    # ceilings, on the same chunk files
    import kvikio

    from .gpu import decompress, setup

    setup.configure()
    sizes = [os.path.getsize(f) for f in files]
    offs = np.cumsum([0, *[(s + 15) // 16 * 16 for s in sizes]])
    comp = cp.empty(int(offs[-1]), dtype=np.uint8)
    raw_read = functools.partial(kvikio_read_all, files)
    raw_read(comp)
    row(
        f"ceiling: kvikio pread, {kvikio.defaults.get('num_threads')} threads (compressed bytes)",
        timed(lambda: raw_read(comp), args.repeat),
        stored,
    )

    chunk_nbytes = a.nbytes // len(files)
    out = cp.empty(chunk_nbytes * len(files), dtype=np.uint8)
    src = np.uint64(comp.data.ptr) + offs[:-1].astype(np.uint64)
    dst = np.uint64(out.data.ptr) + np.arange(len(files), dtype=np.uint64) * np.uint64(chunk_nbytes)
    stream = cp.cuda.Stream(non_blocking=True)

    def decode(decoder: str) -> None:  # as a task decodes: scratch sized from the data, one call
        with stream, _settings({"zstd-decoder": decoder}):
            done = decompress.launch(
                "zstd", src, np.array(sizes), dst, np.full(len(files), chunk_nbytes), stream
            )
            stream.synchronize()
            assert not done.failures(), done.failures()[:3]

    for decoder, title in (("nvcomp", "ceiling: nvCOMP"), ("blocks", "this package's zstd kernels:")):
        out.fill(0)
        decode(decoder)
        assert np.array_equal(out[:chunk_nbytes].view(np.float32).get().reshape(a.chunks), a[: a.chunks[0]])
        row(
            f"{title} batched zstd decode, {len(files)} chunks in one call, on device",
            timed(functools.partial(decode, decoder), args.repeat),
        )
    out = comp = None
    free()

    host = cp.cuda.alloc_pinned_memory(1 << 30)
    hbuf = np.frombuffer(host, dtype=np.uint8, count=1 << 30)
    dbuf = cp.empty(1 << 30, dtype=np.uint8)

    def h2d() -> None:
        dbuf.set(hbuf)
        cp.cuda.Device().synchronize()

    h2d()
    row("ceiling: pinned host-to-device copy", timed(h2d, args.repeat), 1 << 30)
    host = hbuf = dbuf = None
    free()

    if "cold" not in skip:  # page cache dropped for the dataset's files before each pass, untimed
        comp = cp.empty(int(offs[-1]), dtype=np.uint8)
        cold_read = persisting(from_zarr_gpu(args.path, device="gpu", name="bench-cold"), args.threads, free)

        def cold_with(settings: dict[str, Any]) -> Any:
            def run() -> None:
                with _settings(settings):
                    cold_read()

            return run

        ceiling_row = "cold: ceiling: kvikio pread (compressed bytes)"
        cold = interleaved(
            {
                ceiling_row: lambda: raw_read(comp),
                f"cold: from_zarr_gpu().persist(), in-process, {args.threads} threads": cold_read,
                **{
                    f"cold: from_zarr_gpu().persist(), {args.threads} threads, {_label(s)}": cold_with(s)
                    for s in ({"read-slots": 0}, {"coalesce-wait": None})
                },
            },
            args.cold_repeat,
            functools.partial(drop_cache, files),
        )
        for title, seconds in cold.items():
            row(title, seconds, stored if title == ceiling_row else nbytes)
        results["cold_read_x_ratio"] = results[ceiling_row] * nbytes / stored
        comp = None
        free()

    for name in filter(None, args.datasets.split(",")):
        if name != "A":
            extra_dataset(args, name, results, row, free)

    ratio = results[default_row] / results.get("zarr-python enable_gpu()", float("nan"))
    print(f"from_zarr_gpu in-process / zarr-python enable_gpu(): {ratio:.1f}x")
    results["speedup_vs_zarr_enable_gpu"] = ratio
    ceiling = next((v for k, v in results.items() if k.startswith("ceiling: nvCOMP")), float("nan"))
    results["fraction_of_nvcomp_ceiling"] = results[default_row] / ceiling
    print(
        f"from_zarr_gpu in-process / the nvCOMP decode ceiling: {results['fraction_of_nvcomp_ceiling']:.2f}"
    )
    if "cold_read_x_ratio" in results:
        cold = results[f"cold: from_zarr_gpu().persist(), in-process, {args.threads} threads"]
        results["cold_fraction"] = cold / results["cold_read_x_ratio"]
        print(f"cold from_zarr_gpu / (cold raw read rate x ratio): {results['cold_fraction']:.2f}")
    meta = {
        "device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode(),
        "nbytes": nbytes,
        "stored": stored,
        "chunks": len(files),
        "version": zarr_dask_gpu.__version__,
        "dask": dask.__version__,
        "zarr": zarr.__version__,
        "cpus": os.cpu_count(),
        "args": {k: v for k, v in vars(args).items() if k != "func"},
    }
    return {"results": results, "meta": meta}
