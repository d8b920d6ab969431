"""Where the whole read task's time goes when 16 run at once: per-phase host timings of every task
(``zarr_dask_gpu.phases``), and the same pass with one phase taken out, or one setting changed, at
a time.

A task's phases (``phases.NAMES``): planning (its chunks), where they are stored (``locate``), the
reads, the structure check (a kernel and a read-back), the decode (its calls, joined with other tasks'
or not, and their waits), the assembly and the wait for its stream at the end of the task. Each case
runs all blocks of the dataset twice on a thread pool (the second pass is timed) and prints the wall
time, each phase's mean and max over tasks, the decode calls (tasks and chunks each joined, when it
started and how long it took), and for the full case one line per task.

Run on the GPU host after `zarr-dask-gpu bench` has written its dataset:
    python3 benchmarks/timeline.py [--path /tmp/bench-a.zarr] [--threads 16] [--cold] [--case PREFIX]
        [--release] [--settings join-tasks=4,read-slots=0 ...]
With ``--cold`` the dataset's files leave the page cache before each pass; with ``--release`` cupy's pool
is emptied before each pass, so that it allocates all it uses (the bench's first row). ``--scratch``
reports one task's peak device memory per ``decode-call-bytes`` instead.
"""

import argparse
import contextlib
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cupy as cp
import dask
import numpy as np

from zarr_dask_gpu import phases
from zarr_dask_gpu.bench import datasets
from zarr_dask_gpu.bench.ceilings import compressed, kvikio_read_all
from zarr_dask_gpu.bench.timing import drop_cache, free_device, parse_settings, settings, sync_device
from zarr_dask_gpu.gpu.decoders import decompress, validate
from zarr_dask_gpu.gpu.readers.local import KvikioReader
from zarr_dask_gpu.gpu.runtime import setup
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.task import read_region


@contextlib.contextmanager
def _patch(obj: Any, name: str, value: Any) -> Iterator[None]:
    """``obj.name`` (a public function the backend calls through its module) replaced while inside."""
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def cases() -> dict[str, Callable[[], Any]]:
    staged: dict[tuple, Any] = {}
    read = KvikioReader.read

    def cached_read(self: KvikioReader, ranges: Any, skip: int = 0, align: int = 1) -> Any:
        first = next((r.path for r in ranges if r is not None), None)
        key = (first, len(ranges), skip, align)  # a task's reads, kept from the untimed pass
        if key not in staged:
            staged[key] = read(self, ranges, skip, align)
        return staged[key]

    return {
        "full task": contextlib.nullcontext,
        "no structure check": lambda: _patch(validate, "check_batch", lambda *a, **k: []),
        "reads served from memory": lambda: _patch(KvikioReader, "read", cached_read),
        # every decode call returns at once, no failures (the tasks still join their calls)
        "no decode": lambda: _patch(decompress, "decode_joined", lambda c, batches, s: [[] for _ in batches]),
        "read-slots=0 (all tasks read at once)": lambda: settings({"read-slots": 0}),
        "join-decodes=False (a call per task)": lambda: settings({"join-decodes": False}),
        "join-wait=None (waits for its partner)": lambda: settings({"join-wait": None}),
        "kvikio device preads (host-read-below=0)": lambda: settings({"host-read-below": 0}),
    }


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default=datasets.DEFAULT_PATH)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--rows-per-block", type=int, default=64)
    p.add_argument("--scratch", action="store_true", help="only report a task's peak device memory")
    p.add_argument("--case", action="append", help="run only the cases whose names start so (repeatable)")
    p.add_argument("--cold", action="store_true", help="the page cache dropped before each pass (untimed)")
    p.add_argument(
        "--release",
        action="store_true",
        help="cupy's pool emptied before each pass (untimed), as in the bench's first row",
    )
    p.add_argument(
        "--settings",
        action="append",
        default=[],
        help='a case more with these settings, as "join-tasks=4,read-slots=0" (repeatable)',
    )
    args = p.parse_args()
    if args.scratch:
        return scratch(args.path)
    if not os.path.exists(args.path):  # bench's dataset A; any other array given by --path is read as is
        if args.path != datasets.DEFAULT_PATH:
            raise SystemExit(
                f"{args.path} is missing: `python3 -m zarr_dask_gpu.bench.datasets B C D` writes them"
            )
        datasets.write("A")
    info = open_array_info(args.path)
    rows, rest = info.shape[0], tuple(info.shape[1:])  # tasks of --rows-per-block along the first axis
    boxes = [
        ((r, *(0,) * len(rest)), (min(r + args.rows_per_block, rows), *rest))
        for r in range(0, rows, args.rows_per_block)
    ]
    nbytes = info.dtype.itemsize * int(np.prod(info.shape))
    files = datasets.chunk_files(args.path)
    chosen = cases()
    if args.case:
        chosen = {k: v for k, v in chosen.items() if k.startswith(tuple(args.case))}
    for text in args.settings:
        chosen[text] = lambda text=text: settings(parse_settings(text))
    print(
        f"{len(boxes)} tasks, {nbytes / 1e9:.2f} GB, {args.threads} threads, "
        f"CUDA_DEVICE_MAX_CONNECTIONS={os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS')}",
        flush=True,
    )
    if args.cold:  # the disk's rate drifts: the raw read before and after the cases brackets them
        _raw_cold(files)
    for limit in (None, "64MiB") if not args.case else (None,):
        for name, patch in chosen.items() if limit is None else [("full task", contextlib.nullcontext)]:
            with (
                patch(),
                dask.config.set({"zarr_dask_gpu.decode-call-bytes": limit}),
                ThreadPoolExecutor(args.threads) as ex,
            ):
                passes = []
                for _ in range(2):
                    if args.cold:
                        drop_cache(files)
                    if args.release:
                        free_device()
                    with phases.collect() as spans:
                        t0 = time.perf_counter()
                        outs = list(ex.map(lambda b: read_region(info, *b, "gpu", False), boxes))
                        sync_device()
                        dt = time.perf_counter() - t0
                    passes.append(f"{dt * 1e3:.0f}")
                    del outs
            report(
                name, limit, spans, t0, dt, nbytes, passes, per_task=name == "full task" or bool(args.case)
            )
    if args.cold:
        _raw_cold(files)


def report(
    name: str,
    limit: str | None,
    spans: list[phases.Span],
    t0: float,
    dt: float,
    nbytes: int,
    passes: list[str],
    per_task: bool,
) -> None:
    """One case's line: wall time, each phase's mean and max over its spans; its decode calls; and,
    with ``per_task``, each task thread's phases in the order they started (ms from the pass's start)."""
    durations: dict[str, list[float]] = defaultdict(list)
    for s in spans:
        if s.name != "decode-call":
            durations[s.name].append(s.seconds)
    summary = "  ".join(
        f"{ph} {np.mean(v) * 1e3:5.0f}/{np.max(v) * 1e3:4.0f}" for ph, v in sorted(durations.items())
    )
    print(
        f"call-bytes={limit!s:5} {name:40s} {dt * 1e3:6.0f} ms {nbytes / dt / 1e9:5.2f} GB/s | "
        f"mean/max ms: {summary} | passes {'/'.join(passes)} ms",
        flush=True,
    )
    calls = [s for s in spans if s.name == "decode-call"]
    print(
        "    decode calls (tasks x chunks @start+ms): "
        + " ".join(
            f"{s.detail['tasks']}x{s.detail['chunks']}@{(s.start - t0) * 1e3:.0f}+{s.seconds * 1e3:.0f}"
            for s in sorted(calls, key=lambda s: s.start)
        )
    )
    if per_task:
        threads: dict[int, list[phases.Span]] = defaultdict(list)
        for s in spans:
            if s.name != "decode-call":
                threads[s.thread].append(s)
        for tid, mine in threads.items():
            print(
                f"    thread {tid % 10000:4d}: "
                + " ".join(
                    f"{s.name}@{(s.start - t0) * 1e3:.0f}+{s.seconds * 1e3:.0f}"
                    for s in sorted(mine, key=lambda s: s.start)
                )
            )


def _raw_cold(files: list[str]) -> None:
    """The bench's raw read ceiling of the same files, the page cache dropped before each of two reads."""
    setup.configure()
    into = compressed(files)
    times = []
    for _ in range(2):
        drop_cache(files)
        t0 = time.perf_counter()
        kvikio_read_all(files, into)
        times.append(time.perf_counter() - t0)
    ms = " / ".join(f"{t * 1e3:.0f}" for t in times)
    print(f"raw kvikio read of the {len(files)} files, cold: {ms} ms", flush=True)


def scratch(path: str) -> None:
    """One whole task's peak device memory (staging, block and the decode's scratch, all from cupy's
    pool) per decode-call-bytes."""
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
            free_device()
            t0 = time.perf_counter()
            block = read_region(info, *box, "gpu", False)
            sync_device()
            dt = time.perf_counter() - t0
        print(
            f"one task of {block.nbytes >> 20} MiB, decode-call-bytes={limit}: {dt * 1e3:6.1f} ms, "
            f"peak device memory (cupy pool high-water) {pool.total_bytes() / block.nbytes:.2f}x its block",
            flush=True,
        )
        del block


if __name__ == "__main__":
    main()
