"""Where the whole read task's time goes when 16 run at once: per-phase host timings of every task,
and the same pass with one phase taken out at a time.

A task's phases (gpu/backend.py): planning (its chunks, their files' sizes, where each decodes), the
reads, the structure check (a kernel and a read-back), nvCOMP (its scratch query, the launch and the
wait for the decode), and the wait for its stream at the end of the task. Each case runs all blocks of
the dataset twice on a thread pool (the second pass is timed) and prints the wall time, each phase's
mean and max over tasks, and for the full case one line per task.

Run on the GPU host after `zarr-dask-gpu bench` has written its dataset:
    python3 benchmarks/timeline.py [--path /tmp/bench-a.zarr] [--threads 16] [--cold]
With ``--cold`` the dataset's files leave the page cache before each pass.
"""

import argparse
import contextlib
import ctypes
import functools
import os
import threading
import time
import types
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cupy as cp
import dask
import kvikio
import numpy as np

from zarr_dask_gpu import task
from zarr_dask_gpu.bench import chunk_files, drop_cache, kvikio_read_all
from zarr_dask_gpu.gpu import backend, decompress, reader, setup, validate
from zarr_dask_gpu.gpu.reader import KvikioReader
from zarr_dask_gpu.metadata import open_array_info
from zarr_dask_gpu.sample import write_sample
from zarr_dask_gpu.task import read_region

_log: dict[int, list[tuple[str, float, float]]] = defaultdict(list)
_joined: list[tuple[float, float, int, int]] = []  # nvCOMP calls: start, end, tasks, chunks


def _timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            _log[threading.get_ident()].append((name, t0, time.perf_counter()))

    return wrapper


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--rows-per-block", type=int, default=64)
    p.add_argument("--scratch", action="store_true", help="only report nvCOMP's scratch requests")
    p.add_argument("--case", action="append", help="run only the cases whose names start so (repeatable)")
    p.add_argument("--cold", action="store_true", help="the page cache dropped before each pass (untimed)")
    p.add_argument(
        "--blocking-sync",
        action="store_true",
        help="every CUDA wait of the process blocks rather than spins (the primary context's flag)",
    )
    args = p.parse_args()
    if args.blocking_sync:
        _blocking_sync()
    if args.scratch:
        return scratch(args.path)
    if not os.path.exists(args.path):  # bench's dataset A; any other array given by --path is read as is
        if args.path != "/tmp/bench-a.zarr":
            raise SystemExit(f"{args.path} is missing: `zarr-dask-gpu bench --datasets ...` writes B, C, D")
        write_sample(args.path, 4 << 30, 8 << 20)
    info = open_array_info(args.path)
    rows, cols = info.shape
    boxes = [
        ((r, 0), (min(r + args.rows_per_block, rows), cols)) for r in range(0, rows, args.rows_per_block)
    ]
    nbytes = info.dtype.itemsize * rows * cols
    files = chunk_files(args.path)

    read, check, nvc = KvikioReader.read, validate.check_batch, backend.GpuBackend._nvcomp
    ctx = backend.GpuBackend.context
    KvikioReader.read = _timed("read", read)
    validate.check_batch = _timed("check", check)
    backend.GpuBackend._nvcomp = _timed("nvcomp", nvc)
    joined = decompress.decode_joined

    def timed_joined(compression: str, batches: Any, stream: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return joined(compression, batches, stream)
        finally:
            _joined.append((t0, time.perf_counter(), len(batches), sum(len(b.src) for b in batches)))

    decompress.decode_joined = timed_joined
    # the per-chunk Python of planning: which chunks, their files' sizes, where each decodes
    task.block_pieces = _timed("pieces", task.block_pieces)
    backend.locate = _timed("locate", backend.locate)
    backend.direct_offsets = _timed("offsets", backend.direct_offsets)

    @contextlib.contextmanager
    def timed_context(self: backend.GpuBackend) -> Iterator[None]:
        t0 = time.perf_counter()
        with ctx(self):
            yield
            t1 = time.perf_counter()
        _log[threading.get_ident()].append(("wait", t1, time.perf_counter()))
        _log[threading.get_ident()].append(("task", t0, time.perf_counter()))

    backend.GpuBackend.context = timed_context
    staged: dict[str, Any] = {}

    def cached_read(self: KvikioReader, ranges: Any, skip: int = 0, align: int = 1) -> Any:
        key = ranges[0].path
        if key not in staged:
            staged[key] = read(self, ranges, skip, align)
        return staged[key]

    cases: dict[str, Callable[[], Any]] = {
        "full task": contextlib.nullcontext,
        "no structure check": lambda: _patch(validate, "check_batch", lambda *a, **k: []),
        "reads served from memory": lambda: _patch(KvikioReader, "read", _timed("read", cached_read)),
        "no nvCOMP decode": lambda: _patch(backend.GpuBackend, "_nvcomp", lambda *a, **k: []),
        "polling every 0.2 ms instead of an event": lambda: _patch(backend, "wait", _poll),
        "read-slots=0 (all tasks read at once)": lambda: dask.config.set({"zarr_dask_gpu.read-slots": 0}),
        "coalesce-decodes=False (a call per task)": lambda: dask.config.set(
            {"zarr_dask_gpu.coalesce-decodes": False}
        ),
        "coalesce-wait=None (waits for its partner)": lambda: dask.config.set(
            {"zarr_dask_gpu.coalesce-wait": None}
        ),
        "kvikio device preads (host-read-below=0)": lambda: dask.config.set(
            {"zarr_dask_gpu.host-read-below": 0}
        ),
        # what opening a CuFile per read costs (the untimed first pass opens every file once)
        "CuFile handles kept open between passes": lambda: _patch(
            reader, "kvikio", types.SimpleNamespace(CuFile=_KeptFile)
        ),
    }
    print(
        f"{len(boxes)} tasks, {nbytes / 1e9:.2f} GB, {args.threads} threads, "
        f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}",
        flush=True,
    )
    if args.case:
        cases = {k: v for k, v in cases.items() if k.startswith(tuple(args.case))}
    if args.cold:  # the disk's rate drifts: the raw read before and after the cases brackets them
        _raw_cold(files)
    for limit in (None, "64MiB") if not args.case else (None,):
        for name, patch in cases.items() if limit is None else [("full task", contextlib.nullcontext)]:
            with (
                patch(),
                dask.config.set({"zarr_dask_gpu.decode-call-bytes": limit}),
                ThreadPoolExecutor(args.threads) as ex,
            ):
                passes = []
                for _ in range(2):
                    if args.cold:
                        drop_cache(files)
                    _log.clear()
                    _joined.clear()
                    t0 = time.perf_counter()
                    outs = list(ex.map(lambda b: read_region(info, *b, "gpu", False), boxes))
                    cp.cuda.Device().synchronize()
                    dt = time.perf_counter() - t0
                    passes.append(f"{dt * 1e3:.0f}")
                    del outs
            phases: dict[str, list[float]] = defaultdict(list)
            for events in _log.values():
                for ph, a, b in events:
                    phases[ph].append(b - a)
            summary = "  ".join(
                f"{ph} {np.mean(v) * 1e3:5.0f}/{np.max(v) * 1e3:4.0f}" for ph, v in sorted(phases.items())
            )
            print(
                f"call-bytes={limit!s:5} {name:40s} {dt * 1e3:6.0f} ms {nbytes / dt / 1e9:5.2f} GB/s | "
                f"mean/max ms: {summary} | passes {'/'.join(passes)} ms",
                flush=True,
            )
            calls = [f"{k}x{n}@{(a - t0) * 1e3:.0f}+{(b - a) * 1e3:.0f}" for a, b, k, n in sorted(_joined)]
            print("    nvCOMP calls (tasks x chunks @start+ms): " + " ".join(calls))
            if name == "full task" or args.case:
                for tid, events in _log.items():
                    print(
                        f"    thread {tid % 10000:4d}: "
                        + " ".join(f"{ph}@{(a - t0) * 1e3:.0f}+{(b - a) * 1e3:.0f}" for ph, a, b in events)
                    )
    if args.cold:
        _raw_cold(files)


def _raw_cold(files: list[str]) -> None:
    """The bench's raw read ceiling of the same files, the page cache dropped before each of two reads."""
    setup.configure()
    into = cp.empty(sum((os.path.getsize(f) + 15) // 16 * 16 for f in files), dtype=np.uint8)
    times = []
    for _ in range(2):
        drop_cache(files)
        t0 = time.perf_counter()
        kvikio_read_all(files, into)
        times.append(time.perf_counter() - t0)
    ms = " / ".join(f"{t * 1e3:.0f}" for t in times)
    print(f"raw kvikio read of the {len(files)} files, cold: {ms} ms", flush=True)


def _blocking_sync() -> None:
    """CU_CTX_SCHED_BLOCKING_SYNC on device 0's primary context, before the process uses CUDA."""
    cu = ctypes.CDLL("libcuda.so.1")
    status = (cu.cuInit(0), cu.cuDevicePrimaryCtxSetFlags_v2(0, 4))
    flags, active = ctypes.c_uint(), ctypes.c_int()
    cu.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active))
    print(f"blocking sync: cuInit, cuDevicePrimaryCtxSetFlags_v2 -> {status}; flags {flags.value}")


def _poll(stream: cp.cuda.Stream) -> None:
    """The wait before the blocking-sync event: polling an event, a 0.2 ms sleep between polls."""
    done = stream.record()
    while not done.done:
        time.sleep(0.0002)


_open_files: dict[str, Any] = {}


class _KeptFile:
    """A kvikio CuFile that stays open when the reader closes it (``_open_files`` holds it)."""

    def __init__(self, path: str, mode: str = "r") -> None:
        if path not in _open_files:
            _open_files[path] = kvikio.CuFile(path, mode)
        self.pread = _open_files[path].pread

    def close(self) -> None:
        pass


def scratch(path: str) -> None:
    """One whole task's peak device memory (staging, block and nvCOMP's scratch, all from cupy's
    pool) per decode-call-bytes; benchmarks/probe_nvcomp_c.py has nvCOMP's scratch per chunk."""
    info = open_array_info(path)
    pool = cp.get_default_memory_pool()
    read_region(info, (0, 0), (2, info.shape[1]), "gpu", False)  # warm: kernels, stream
    # 64 rows: a 256 MiB block of A; 256 rows: 1 GiB in calls of 32 chunks (docs/performance.md)
    for rows, limit in (
        (64, None),
        (64, "128MiB"),
        (64, "64MiB"),
        (64, "32MiB"),
        (256, None),
        (256, "256MiB"),
    ):
        box = ((0, 0), (rows, info.shape[1]))
        with dask.config.set({"zarr_dask_gpu.decode-call-bytes": limit}):
            cp.cuda.Device().synchronize()
            pool.free_all_blocks()
            t0 = time.perf_counter()
            block = read_region(info, *box, "gpu", False)
            cp.cuda.Device().synchronize()
            dt = time.perf_counter() - t0
        print(
            f"one task of {block.nbytes >> 20} MiB, decode-call-bytes={limit}: {dt * 1e3:6.1f} ms, "
            f"peak device memory (cupy pool high-water) {pool.total_bytes() / block.nbytes:.2f}x its block",
            flush=True,
        )
        del block


@contextlib.contextmanager
def _patch(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


if __name__ == "__main__":
    main()
