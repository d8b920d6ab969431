"""nvCOMP's C API (libnvcomp through ctypes) on dataset A's chunks, against the Python ``Codec``: the
zstd scratch it asks for, by the size-only query and by the query that reads the compressed data,
per backend; and decode times of one call of every chunk and of 2 to 16 concurrent calls sharing them,
with scratch we allocate (cupy's pool) of each size. Values are checked against numcodecs.

Run on the GPU host after `zarr-dask-gpu bench` wrote dataset A:
    python3 benchmarks/probe_nvcomp_c.py [--path /tmp/bench-a.zarr]
"""

import argparse
import ctypes
import os
import threading
import time

import cupy as cp
import numpy as np
from numcodecs import Zstd
from nvidia.libnvcomp import load_library

from zarr_dask_gpu.bench import chunk_files

P, SZ = ctypes.c_void_p, ctypes.c_size_t


class Opts(ctypes.Structure):  # nvcompBatchedZstdDecompressOpts_t
    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


lib = load_library()
lib.nvcompBatchedZstdDecompressGetTempSize.argtypes = [SZ, SZ, Opts, ctypes.POINTER(SZ), SZ, P]
lib.nvcompBatchedZstdDecompressGetTempSizeSync.argtypes = [P, P, SZ, SZ, ctypes.POINTER(SZ), SZ, Opts, P, P]
lib.nvcompBatchedZstdDecompressAsync.argtypes = [P, P, P, P, SZ, P, SZ, P, Opts, P, P]


def check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what}: nvcompStatus {status}")


class Batch:
    """Device tables of one batch: chunk ``i`` at ``src[i]`` (``csize[i]`` bytes) into ``dst[i]``."""

    def __init__(
        self, comp: cp.ndarray, offs: np.ndarray, sizes: np.ndarray, out: cp.ndarray, chunk: int
    ) -> None:
        n = len(offs)
        self.n, self.chunk = n, chunk
        self.src = cp.asarray(comp.data.ptr + offs.astype(np.uint64))
        self.csize = cp.asarray(sizes.astype(np.uint64))
        self.dst = cp.asarray(out.data.ptr + np.arange(n, dtype=np.uint64) * chunk)
        self.dsize = cp.full(n, chunk, dtype=np.uint64)
        self.got = cp.zeros(n, dtype=np.uint64)
        self.status = cp.full(n, -1, dtype=np.int32)

    def temp_sync(self, backend: int, stream: cp.cuda.Stream) -> int:
        t = SZ()
        check(
            lib.nvcompBatchedZstdDecompressGetTempSizeSync(
                self.src.data.ptr,
                self.csize.data.ptr,
                self.n,
                self.chunk,
                ctypes.byref(t),
                self.n * self.chunk,
                Opts(backend),
                self.status.data.ptr,
                stream.ptr,
            ),
            "GetTempSizeSync",
        )
        return t.value

    def decode(self, temp: cp.ndarray, backend: int, stream: cp.cuda.Stream) -> None:
        check(
            lib.nvcompBatchedZstdDecompressAsync(
                self.src.data.ptr,
                self.csize.data.ptr,
                self.dsize.data.ptr,
                self.got.data.ptr,
                self.n,
                temp.data.ptr,
                temp.nbytes,
                self.dst.data.ptr,
                Opts(backend),
                self.status.data.ptr,
                stream.ptr,
            ),
            "DecompressAsync",
        )

    def verify(self) -> None:
        assert (self.status == 0).all(), f"statuses {cp.unique(self.status)}"
        assert (self.got == self.chunk).all(), "decoded sizes differ"


def temp_async(n: int, chunk: int, backend: int) -> int | str:
    t = SZ()
    s = lib.nvcompBatchedZstdDecompressGetTempSize(n, chunk, Opts(backend), ctypes.byref(t), n * chunk, None)
    return t.value if s == 0 else f"status {s}"


def concurrent(
    comp: cp.ndarray,
    offs: np.ndarray,
    sizes: np.ndarray,
    out: cp.ndarray,
    chunk: int,
    backend: int,
    truth,
    calls: int,
) -> None:
    """``calls`` threads, each its own stream and an equal share of the chunks in one call: 16 calls
    of 32 chunks are the pipeline's shape on A; fewer, larger calls are what coalescing the decodes
    of a worker's tasks would give."""
    n_all = len(offs)
    per = n_all // calls
    batches = [
        Batch(
            comp, offs[k * per : (k + 1) * per], sizes[k * per : (k + 1) * per], out[k * per * chunk :], chunk
        )
        for k in range(calls)
    ]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(calls)]
    temps = [cp.empty(b.temp_sync(backend, s), dtype=np.uint8) for b, s in zip(batches, streams, strict=True)]

    def run(k: int) -> None:
        batches[k].decode(temps[k], backend, streams[k])
        streams[k].synchronize()

    for _ in range(3):
        out.fill(0)
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        threads = [threading.Thread(target=run, args=(k,)) for k in range(calls)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        dt = time.perf_counter() - t0
    for b in batches:
        b.verify()
    assert cp.array_equal(out[-chunk:], truth(n_all - 1))
    scratch = sum(t.nbytes for t in temps) / 2**20
    print(
        f"backend {backend}: {calls} threads x {per} chunks, own streams, scratch by data "
        f"({scratch:.0f} MiB): {dt * 1e3:.1f} ms, {n_all * chunk / dt / 1e9:.2f} GB/s",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    args = p.parse_args()
    files = chunk_files(args.path)
    blobs = []
    for f in files:
        with open(f, "rb") as fh:
            blobs.append(fh.read())
    chunk = len(Zstd().decode(blobs[0]))
    sizes = np.array([len(b) for b in blobs], dtype=np.int64)
    offs = np.cumsum([0, *((sizes + 15) // 16 * 16)])[:-1]
    host = np.zeros(int(offs[-1] + sizes[-1]), dtype=np.uint8)
    for o, b in zip(offs, blobs, strict=True):
        host[o : o + len(b)] = np.frombuffer(b, dtype=np.uint8)
    comp = cp.asarray(host)
    n_all = len(files)
    out = cp.empty(n_all * chunk, dtype=np.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    mib = 2**20
    print(f"{n_all} chunks of {chunk / mib:.0f} MiB decoded, {sizes.mean() / mib:.2f} MiB stored", flush=True)

    for backend in (0, 1, 2):
        for n in (1, 32, 128, n_all):
            a = temp_async(n, chunk, backend)
            try:
                s = Batch(comp, offs[:n], sizes[:n], out, chunk).temp_sync(backend, stream)
            except RuntimeError as e:
                s = str(e)
            fa = f"{a / n / chunk:.3f}x" if isinstance(a, int) else a
            fs = f"{s / n / chunk:.3f}x" if isinstance(s, int) else s
            print(f"backend {backend}, {n:3d} chunks: scratch by sizes {fa}, by data {fs} of decoded bytes")

    def truth(i: int) -> cp.ndarray:
        return cp.asarray(np.frombuffer(Zstd().decode(blobs[i]), dtype=np.uint8))

    for backend in (0, 2):
        whole = Batch(comp, offs, sizes, out, chunk)
        for how in ("sizes", "data"):
            by_sizes = how == "sizes"
            t_bytes = temp_async(n_all, chunk, backend) if by_sizes else whole.temp_sync(backend, stream)
            if not isinstance(t_bytes, int):
                continue
            temp = cp.empty(max(t_bytes, 1), dtype=np.uint8)
            times = []
            for _ in range(4):
                out.fill(0)
                cp.cuda.Device().synchronize()
                t0 = time.perf_counter()
                whole.decode(temp, backend, stream)
                stream.synchronize()
                times.append(time.perf_counter() - t0)
            whole.verify()
            for i in (0, n_all // 2, n_all - 1):
                assert cp.array_equal(out[i * chunk : (i + 1) * chunk], truth(i)), f"chunk {i} differs"
            dt = float(np.median(times[1:]))
            print(
                f"backend {backend}: one call of {n_all} chunks, scratch by {how} "
                f"({t_bytes / mib:.0f} MiB): {dt * 1e3:.1f} ms, {n_all * chunk / dt / 1e9:.2f} GB/s, "
                "values equal",
                flush=True,
            )
            del temp

        for calls in (2, 4, 8, 16):
            concurrent(comp, offs, sizes, out, chunk, backend, truth, calls)
    os._exit(0)


if __name__ == "__main__":
    main()
