"""What reading dataset A's 512 chunk files (about 2.6 MB each) into device memory costs, as the
bench's ceiling reads them (one thread opens every file and queues every pread) and as tasks do
(``KvikioReader.read`` of a task's 32 files, 4 or 16 tasks at once), against kvikio's thread count
and task size.

Run on the GPU host (dataset A is written when missing):
    python3 benchmarks/probe_large_reads.py [--path /tmp/bench-a.zarr]
"""

import argparse
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import kvikio
import kvikio.defaults
import numpy as np
from gpu_timing import median_seconds

from zarr_dask_gpu.bench import kvikio_read_all
from zarr_dask_gpu.gpu import setup
from zarr_dask_gpu.gpu.reader import KvikioReader
from zarr_dask_gpu.metadata import open_array_info
from zarr_dask_gpu.plan import block_pieces
from zarr_dask_gpu.sample import write_sample
from zarr_dask_gpu.storage import locate


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    args = p.parse_args()
    if not os.path.exists(args.path):
        write_sample(args.path, 4 << 30, 8 << 20)
    setup.configure()
    info = open_array_info(args.path)
    rows, cols = info.shape
    groups = [
        [q.coords for q in block_pieces((r, 0), (min(r + 64, rows), cols), info.chunks)]
        for r in range(0, rows, 64)
    ]
    ranges = [locate(info, g) for g in groups]
    files = [r.path for rs in ranges for r in rs]
    sizes = [r.size for rs in ranges for r in rs]
    total = sum(sizes)
    offs = np.cumsum([0, *[(s + 15) // 16 * 16 for s in sizes]])
    buf = cp.empty(int(offs[-1]), dtype=np.uint8)
    reader = KvikioReader()

    raw = functools.partial(kvikio_read_all, files, buf)  # the bench's ceiling

    def tasks(threads: int) -> Callable[[], object]:
        def run() -> None:
            with ThreadPoolExecutor(threads) as ex:
                list(ex.map(lambda rs: reader.read(rs, align=16), ranges))

        return run

    def one_call() -> None:
        reader.read([r for rs in ranges for r in rs], align=16)

    cases = {
        "raw: one thread, every file's pread queued": raw,
        "KvikioReader.read of all 512 files, one call": one_call,
        "KvikioReader.read of 32 files, 4 tasks at once": tasks(4),
        "KvikioReader.read of 32 files, 16 tasks at once": tasks(16),
    }
    print(f"{len(files)} files, {total / 1e9:.2f} GB compressed")
    for threads in (16, 32, 64):
        for task_size in (4 << 20, 1 << 20):
            kvikio.defaults.set("num_threads", threads)
            kvikio.defaults.set("task_size", task_size)
            for name, fn in cases.items():
                ms = median_seconds(fn) * 1e3
                print(
                    f"kvikio {threads:2d} threads, task {task_size >> 20} MiB: {name:50s} "
                    f"{ms:6.1f} ms {total / ms / 1e6:5.1f} GB/s",
                    flush=True,
                )


if __name__ == "__main__":
    main()
