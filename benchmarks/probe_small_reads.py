"""What reading dataset B's 4096 small chunk files costs on the host, and how it scales with threads:
each pass finds the files' sizes (``locate``: a path per chunk, the stats in one native batch) and
reads them (``pread_all``: one native batch) into one pinned buffer, the work split over 1 to 16
Python threads (each its own files, as dask tasks would); alone, and beside 16 threads waiting for GPU work
as tasks do: polling an event with a 0.2 ms sleep (the wait before this session),
``stream.synchronize()`` (CUDA spins on a core by default) or a blocking-sync event (the wait now).

Run on the GPU host after `zarr-dask-gpu bench --datasets B` wrote dataset B:
    python3 benchmarks/probe_small_reads.py [--path /tmp/bench-a.zarr-B]
"""

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import cupyx
import numpy as np

from zarr_dask_gpu.gpu import sync
from zarr_dask_gpu.io import layout, pread_all
from zarr_dask_gpu.metadata import open_array_info
from zarr_dask_gpu.plan import block_pieces
from zarr_dask_gpu.storage import locate

_SPIN = """
extern "C" __global__ void spin(long long n) {
    long long t = clock64();
    while (clock64() - t < n);
}
"""


def one(info, coords: list) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    plan = layout(locate(info, coords), 0, 16)
    t1 = time.perf_counter()
    pread_all(cupyx.empty_pinned(plan.total, dtype=np.uint8), plan)
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr-B")
    args = p.parse_args()
    info = open_array_info(args.path)
    coords = [q.coords for q in block_pieces((0,) * len(info.shape), info.shape, info.chunks)]
    one(info, coords)  # warm: page cache, dentries
    spin = cp.RawKernel(_SPIN, "spin")
    waits = {
        "alone": None,
        "16 polling every 0.2 ms": lambda s: _poll(s.record()),
        "16 in stream.synchronize()": lambda s: s.synchronize(),
        "16 on blocking-sync events": sync.wait,
    }
    for label, wait in waits.items():
        stop = threading.Event()

        def waiter(wait=wait, stop=stop) -> None:  # type: ignore[no-untyped-def]
            with cp.cuda.Stream(non_blocking=True) as s:
                while not stop.is_set():
                    spin((1,), (1,), (np.int64(20_000_000),))  # about 10 ms, on s
                    wait(s)

        threads = [threading.Thread(target=waiter) for _ in range(16 if wait else 0)]
        for t in threads:
            t.start()
        for n in (1, 4, 16):
            parts = [coords[k::n] for k in range(n)]
            with ThreadPoolExecutor(n) as ex:
                runs = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    got = list(ex.map(lambda c: one(info, c), parts))
                    runs.append((time.perf_counter() - t0, got))
            wall, got = min(runs, key=lambda r: r[0])
            found, read = (np.mean([g[k] for g in got]) * 1e3 for k in (0, 1))
            print(
                f"{label:27s} {n:2d} threads: {len(coords)} files {wall * 1e3:6.1f} ms "
                f"({wall * 1e6 / len(coords):5.1f} us a file); a thread's locate {found:6.1f} ms, "
                f"reads {read:6.1f} ms",
                flush=True,
            )
        stop.set()
        for t in threads:
            t.join()


def _poll(done: cp.cuda.Event) -> None:
    while not done.done:
        time.sleep(0.0002)


if __name__ == "__main__":
    main()
