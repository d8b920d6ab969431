"""Can nvCOMP and the structure check read compressed chunks straight from pinned host memory?

A task's staging buffer (compressed chunks, 0.31x of A's block) is device memory today; nvCOMP's zstd
scratch (1.49x) and the block (1x) make the rest of its 2.80x peak. Kernels can read pinned host
memory through its device mapping (over PCIe), so a task could stage in host memory and peak at
about 2.5x, if the decode does not slow down. This times, on dataset A's 512 chunks: one nvCOMP call
and 16 concurrent calls of 32 (the pipeline's shape), and the zstd structure check, with inputs in
device memory and in mapped pinned host memory; and kvikio's reads of the files into each.

Run on the GPU host after `zarr-dask-gpu bench` wrote dataset A:
    python3 benchmarks/probe_host_input.py [--path /tmp/bench-a.zarr]
"""

import argparse
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import cupyx
import kvikio
import kvikio.defaults
import numpy as np
from gpu_timing import median_seconds
from numcodecs import Zstd

from zarr_dask_gpu.bench import chunk_files
from zarr_dask_gpu.gpu import decompress, validate
from zarr_dask_gpu.gpu.reader import mapped
from zarr_dask_gpu.gpu.sync import wait


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    args = p.parse_args()
    files = chunk_files(args.path)
    sizes = np.array([os.path.getsize(f) for f in files], dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum((sizes + 15) // 16 * 16)[:-1]]).astype(np.int64)
    total = int(offs[-1] + sizes[-1])
    host = cupyx.empty_pinned(total, dtype=np.uint8)
    dev = cp.empty(total, dtype=np.uint8)
    with open(files[0], "rb") as f:
        chunk = len(Zstd().decode(f.read()))
    n = len(files)
    gb = n * chunk / 1e9
    pool = ThreadPoolExecutor(16)
    kvikio.defaults.set("num_threads", 16)

    def read_into(buf) -> None:  # kvikio, its thread pool, every file at once
        handles = [kvikio.CuFile(f, "r") for f in files]
        futs = [h.pread(buf[o : o + s], int(s)) for h, o, s in zip(handles, offs, sizes, strict=True)]
        for fu in futs:
            fu.get()
        for h in handles:
            h.close()

    for name, buf in (("device", dev), ("pinned host", host)):
        dt = median_seconds(lambda buf=buf: read_into(buf), repeat=4)
        rate = total / dt / 1e9
        print(f"kvikio reads of A's {n} files into {name} memory: {dt * 1e3:.1f} ms, {rate:.2f} GB/s stored")
    assert cp.array_equal(dev[: int(sizes[0])], cp.asarray(host[: int(sizes[0])]))
    out = cp.empty(n * chunk, dtype=np.uint8)
    expected = np.full(n, chunk, dtype=np.int64)
    truth = []
    for i in (0, n - 1):
        with open(files[i], "rb") as f:
            truth.append(np.frombuffer(Zstd().decode(f.read()), np.uint8))
    sources = {"device": dev, "pinned host (mapped)": mapped(host)}
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(16)]

    def decode(src: cp.ndarray, calls: int) -> None:
        per = n // calls

        def one(k: int) -> None:
            s = streams[k]
            sl = slice(k * per, (k + 1) * per)
            with s:
                d = decompress.launch(
                    "zstd",
                    np.uint64(src.data.ptr) + offs[sl].astype(np.uint64),
                    sizes[sl],
                    np.uint64(out.data.ptr) + np.arange(k * per, (k + 1) * per, dtype=np.uint64) * chunk,
                    expected[sl],
                    s,
                )
                wait(s)
            assert not d.failures(), d.failures()[:3]

        list(pool.map(one, range(calls)))

    for name, src in sources.items():
        for calls in (1, 16):
            out.fill(0)
            dt = median_seconds(lambda src=src, calls=calls: decode(src, calls), repeat=4)
            assert np.array_equal(out[:chunk].get(), truth[0])
            assert np.array_equal(out[-chunk:].get(), truth[1])
            what = f"nvCOMP zstd, input in {name}, {calls} call(s) of {n // calls} chunks"
            print(f"{what}: {dt * 1e3:.1f} ms, {gb / dt:.2f} GB/s, values equal")

        def check(src: cp.ndarray = src, stream: cp.cuda.Stream = streams[0]) -> None:
            with stream:
                assert not validate.check_batch(src, offs, sizes, "zstd", expected)
            wait(stream)

        dt = median_seconds(check, repeat=4)
        print(f"zstd structure check of {n} chunks, input in {name}: {dt * 1e3:.2f} ms")
    print("threads alive:", threading.active_count())
    os._exit(0)


if __name__ == "__main__":
    main()
