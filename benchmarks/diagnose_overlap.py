"""Why tasks do not overlap on the GPU: time the pieces of a read task, alone and from 8 threads.

Run on the GPU host after bench_read.py has written its dataset:
    python3 benchmarks/diagnose_overlap.py [--path /tmp/bench-a.zarr] [--threads 8]
Each row times all blocks of the dataset (read in one pass per row, page cache warm).
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np
from nvidia import nvcomp

from zarr_dask_gpu.gpu import validate
from zarr_dask_gpu.gpu.backend import GpuBackend, _Interface
from zarr_dask_gpu.metadata import open_array_info
from zarr_dask_gpu.plan import block_pieces


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rows-per-block", type=int, default=64)
    args = p.parse_args()
    info, be = open_array_info(args.path), GpuBackend()
    rows, cols = info.shape
    blocks = [
        block_pieces((r, 0), (min(r + args.rows_per_block, rows), cols), info.chunks)
        for r in range(0, rows, args.rows_per_block)
    ]
    paths = [[info.chunk_path(q.coords) for q in b] for b in blocks]
    expected = int(np.prod(info.chunks)) * info.dtype.itemsize
    staged = [be._reader.read(ps, align=16) for ps in paths]

    def wait(stream: cp.cuda.Stream) -> None:
        ev = stream.record()
        while not ev.done:
            time.sleep(0.0002)

    def decode(i: int, wrap: bool, check: bool) -> None:
        s = be._stream()
        with s:
            st = staged[i]
            if check:
                validate.check_batch(st.buffer, st.offsets, st.sizes, "zstd", expected)
            n = len(st.offsets)
            out = cp.empty(n * expected, np.uint8)
            src_buf, out_buf = (_Interface(st.buffer), _Interface(out)) if wrap else (st.buffer, out)
            src = nvcomp.as_arrays(src_buf, st.offsets.tolist(), st.sizes.tolist(), cuda_stream=s.ptr)
            dst = nvcomp.as_arrays(
                out_buf, list(range(0, n * expected, expected)), [expected] * n, cuda_stream=s.ptr
            )
            be._codec("zstd").decode(src, out=dst, decompression_config=be._sized_config("zstd", expected, n))
            wait(s)

    def full(i: int) -> None:
        with be.context():
            be.decode(info, blocks[i])

    rows_out = {
        "kvikio reads only": lambda i: be._reader.read(paths[i], align=16),
        "whole GpuBackend.decode (read, check, decode, views)": full,
        "check + decode, cupy buffers (CAI v3 with stream)": lambda i: decode(i, False, True),
        "decode only, cupy buffers": lambda i: decode(i, False, False),
        "decode only, CAI v2 wrappers": lambda i: decode(i, True, False),
        "check + decode, CAI v2 wrappers": lambda i: decode(i, True, True),
    }
    nbytes = info.dtype.itemsize * rows * cols
    print(f"{len(blocks)} blocks of {len(blocks[0])} chunks, {nbytes / 1e9:.2f} GB")
    for name, fn in rows_out.items():
        for threads in (1, args.threads):
            with ThreadPoolExecutor(threads) as ex:
                list(ex.map(fn, range(len(blocks))))
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                list(ex.map(fn, range(len(blocks))))
                cp.cuda.Device().synchronize()
                dt = time.perf_counter() - t0
            print(
                f"{name:55s} {threads:2d} threads {dt * 1e3:7.0f} ms  {nbytes / dt / 1e9:6.2f} GB/s",
                flush=True,
            )


if __name__ == "__main__":
    main()
