"""Where a pass's reads lose rate: the GPU reader (``KvikioReader.read``) by tasks of ``--group``
chunk files each, one task, pairs and fours at once (``read-slots`` lets two read), alongside a busy
GPU (a spinning kernel on every SM, or a copy over device memory), against the host's preads into
pinned memory, and at kvikio pool sizes and CUDA's spinning waits.
Run on the GPU host after `zarr-dask-gpu bench` (or ``python3 -m zarr_dask_gpu.bench.datasets A E``)
has written the dataset:
    python3 benchmarks/probe_reads.py [--path /tmp/bench-a.zarr] [--group 128]
"""

import argparse
import contextlib
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import cupy as cp
import cupyx
import kvikio.defaults
import numpy as np

from zarr_dask_gpu.gpu.readers.local import KvikioReader
from zarr_dask_gpu.gpu.runtime import setup
from zarr_dask_gpu.storage.readers import layout, pread_all
from zarr_dask_gpu.storage.units import Range

_SPIN = r"""extern "C" __global__ void spin(long long cycles, float* x) {
    long long t0 = clock64();
    float a = threadIdx.x;
    while (clock64() - t0 < cycles) a = a * 1.0001f + 1.f;
    if (a == 0.f) x[0] = a;
}"""


def device_read(ranges: Sequence[Range]) -> None:
    KvikioReader().read(ranges)


def host_read(ranges: Sequence[Range]) -> None:
    plan = layout(ranges, 0, 1)
    pread_all(cupyx.empty_pinned(plan.total, dtype=np.uint8), plan)


def at_once(groups: Sequence[Sequence[Range]], read: Callable[[Sequence[Range]], None]) -> Callable[[], None]:
    """A body: each group read on a thread of its own, all at once."""

    def run() -> None:
        threads = [threading.Thread(target=read, args=(g,)) for g in groups]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    return run


@contextlib.contextmanager
def busy(kind: str) -> Iterator[None]:
    """Inside, another thread keeps the GPU busy: "sm" a spinning kernel on every SM, "hbm" a copy
    over 2 GiB of device memory."""
    big = cp.empty(1 << 29, dtype=cp.float32)
    spin = cp.RawKernel(_SPIN, "spin")
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    stop = threading.Event()

    def loop() -> None:
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            while not stop.is_set():
                if kind == "sm":
                    spin((sms * 8,), (256,), (np.int64(20_000_000), big))
                else:
                    big[:] = big * 1.0001 + 1
                stream.synchronize()

    t = threading.Thread(target=loop)
    t.start()
    time.sleep(0.05)
    try:
        yield
    finally:
        stop.set()
        t.join()


def timed(name: str, body: Callable[[], None], nbytes: int, rounds: int = 7) -> None:
    body()
    ts = []
    for _ in range(rounds):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        body()
        ts.append(time.perf_counter() - t)
    m = statistics.median(ts)
    passes = " ".join(f"{s * 1e3:.0f}" for s in ts)
    print(f"{name:40s} {m * 1e3:7.1f} ms {nbytes / m / 1e9:6.2f} GB/s  ({passes})", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--group", type=int, default=128, help="chunk files a task")
    args = p.parse_args()
    setup.configure()
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(args.path) for f in fs)
    ranges = [Range(f, 0, n) for f in files if (n := os.path.getsize(f)) > 1 << 20]  # chunks, not metadata
    groups = [ranges[i : i + args.group] for i in range(0, len(ranges), args.group)]
    size = sum(r.size for r in ranges)
    print(f"{len(ranges)} files, {size / 1e9:.2f} GB, kvikio threads {kvikio.defaults.get('num_threads')}")

    def nbytes(k: int) -> int:
        return sum(r.size for g in groups[:k] for r in g)

    g = args.group
    timed("all files, one read call", lambda: device_read(ranges), size)
    for k in (1, 2, 4):
        timed(f"{k} tasks of {g}", at_once(groups[:k], device_read), nbytes(k))
    for kind in ("sm", "hbm"):
        with busy(kind):
            timed(f"2 tasks, GPU busy ({kind})", at_once(groups[:2], device_read), nbytes(2))
    for k in (2, 4):
        timed(f"{k} tasks, host preads to pinned", at_once(groups[:k], host_read), nbytes(k))
    for n in (8, 32):
        with kvikio.defaults.set({"num_threads": n}):
            for k in (2, 4):
                timed(f"{k} tasks, kvikio threads {n}", at_once(groups[:k], device_read), nbytes(k))
    setup.blocking_sync(False)
    timed("2 tasks, waits spin", at_once(groups[:2], device_read), nbytes(2))
    timed("all files, waits spin", lambda: device_read(ranges), size)


if __name__ == "__main__":
    main()
