"""Where a read task's time goes, alone and from many threads: kvikio reads, decodes issued per task
thread, decodes merged by the batcher (gpu/batcher.py), whole tasks with and without merging.

Run on the GPU host after `zarr-dask-gpu bench` has written its dataset:
    python3 benchmarks/diagnose_overlap.py [--path /tmp/bench-a.zarr] [--threads 8,16]
Each row times all blocks of the dataset, one pass per row, page cache warm.
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import dask
import numpy as np

from zarr_dask_gpu.gpu.backend import GpuBackend
from zarr_dask_gpu.metadata import open_array_info
from zarr_dask_gpu.plan import block_pieces
from zarr_dask_gpu.storage import locate
from zarr_dask_gpu.task import read_region


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--threads", default="8,16")
    p.add_argument("--rows-per-block", type=int, default=64)
    args = p.parse_args()
    info, be = open_array_info(args.path), GpuBackend()
    rows, cols = info.shape
    boxes = [
        ((r, 0), (min(r + args.rows_per_block, rows), cols)) for r in range(0, rows, args.rows_per_block)
    ]
    blocks = [block_pieces(a, b, info.chunks) for a, b in boxes]
    paths = [locate(info, [q.coords for q in b]) for b in blocks]
    expected = int(np.prod(info.chunks)) * info.dtype.itemsize
    staged = [be._reader.read(ps, align=16) for ps in paths]

    def decode(i: int) -> None:
        with be.context():
            st = staged[i]
            n = len(st.offsets)
            out = cp.empty(n * expected, np.uint8)
            starts, sizes = np.arange(n) * expected, np.full(n, expected)
            be._nvcomp("zstd", st.buffer, st.offsets, st.sizes, out, starts, sizes, True)

    def task(i: int) -> None:
        read_region(info, *boxes[i], "gpu", False)

    cases = {  # name: (function, decode batching)
        "kvikio reads only": (lambda i: be._reader.read(paths[i], align=16), False),
        "decode only, one nvCOMP call per task": (decode, False),
        "decode only, merged by the batcher": (decode, True),
        "whole task, one nvCOMP call per task": (task, False),
        "whole task, merged by the batcher": (task, True),
    }
    nbytes = info.dtype.itemsize * rows * cols
    print(f"{len(blocks)} blocks of {len(blocks[0])} chunks, {nbytes / 1e9:.2f} GB", flush=True)
    for name, (fn, batching) in cases.items():
        for threads in (1, *(int(t) for t in args.threads.split(","))):
            with (
                ThreadPoolExecutor(threads) as ex,
                dask.config.set({"zarr_dask_gpu.decode-batching": batching}),
            ):
                list(ex.map(fn, range(len(blocks))))
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                list(ex.map(fn, range(len(blocks))))
                cp.cuda.Device().synchronize()
                dt = time.perf_counter() - t0
            print(
                f"{name:45s} {threads:2d} threads {dt * 1e3:7.0f} ms  {nbytes / dt / 1e9:6.2f} GB/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
