"""The structure check of blosc's inner lz4 streams (dataset D) on the GPU: the package's kernel
(``validate_lz4``: a warp per stream, its lanes parsing the sequences that would start at 32 bytes in
a row and shuffles following those that do) against one thread per stream walking sequence by
sequence (``validate``), alone and with 16 threads checking at once; and, for scale, nvCOMP's decode
of the same streams. (A thread per stream, each through its own 64-byte window, measured slowest:
23.9 ms a task; the warp walking one sequence at a time through a shared window 5.4 ms a task, 71.9
ms for 16: docs/performance.md.) Both must find D's streams sound and flag the same streams of a copy
with 64 of them damaged (random bytes written over 16 to 64 bytes of each).

Run on the GPU host after `zarr-dask-gpu bench --datasets D` wrote dataset D:
    python3 benchmarks/probe_check.py [--path /tmp/bench-a.zarr-D]
"""

import argparse
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np
from gpu_timing import median_seconds

from zarr_dask_gpu.codecs import headers
from zarr_dask_gpu.gpu import blosc, decompress, validate
from zarr_dask_gpu.gpu.reader import KvikioReader
from zarr_dask_gpu.metadata import open_array_info
from zarr_dask_gpu.plan import block_pieces
from zarr_dask_gpu.storage import locate


def streams(info, start: int, stop: int) -> tuple:
    """Device buffer of the blosc frames of rows [start, stop), and its inner compressed streams."""
    pieces = block_pieces((start, 0), (stop, info.shape[1]), info.chunks)
    skip = headers.skip_bytes(info.chain.gpu.compression)[0]
    staged = KvikioReader().read(locate(info, [p.coords for p in pieces]), skip=skip, align=16)
    expected = int(np.prod(info.chunks)) * info.dtype.itemsize
    out = cp.empty(len(pieces) * expected, dtype=np.uint8)
    got: dict = {}

    def keep(which, src, csize, target, dst, dsize):  # type: ignore[no-untyped-def]
        got.update(src=src, csize=csize, dsize=dsize)
        return []

    blosc.decode_batch(
        staged.buffer, staged.offsets, staged.sizes, expected, out, np.arange(len(pieces)) * expected, keep
    )
    return staged.buffer, got["src"], got["csize"], got["dsize"]


def one_thread(buf: cp.ndarray, src: np.ndarray, csize: np.ndarray, dsize: np.ndarray) -> np.ndarray:
    """One thread per stream, walking it sequence by sequence in global memory."""
    n = len(src)
    status, claimed = cp.empty(n, dtype=np.int32), cp.empty(n, dtype=np.int64)
    validate._kernel("validate")(
        ((n + 127) // 128,),
        (128,),
        (
            buf,
            cp.asarray(src),
            cp.asarray(csize),
            np.int32(5),
            cp.asarray(dsize),
            status,
            claimed,
            np.int32(n),
        ),
    )
    return np.flatnonzero(status.get())


def warp(buf: cp.ndarray, src: np.ndarray, csize: np.ndarray, dsize: np.ndarray) -> np.ndarray:
    bad = validate.check_batch(buf, src, csize, "lz4-block", dsize)
    return np.array([i for i, _ in bad], dtype=np.int64)


def on_own_stream(fn, batch: tuple) -> None:  # type: ignore[no-untyped-def]
    with cp.cuda.Stream(non_blocking=True) as s:
        fn(*batch)
        s.synchronize()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr-D")
    args = p.parse_args()
    info = open_array_info(args.path)
    rows = info.shape[0]
    task_rows = rows // 16
    batches = [streams(info, r, r + task_rows) for r in range(0, rows, task_rows)]
    buf, src, csize, dsize = batches[0]
    print(
        f"{args.path}: {info.shape}, chunks {info.chunks}; a task's block: {len(src)} lz4 streams, "
        f"{csize.sum() / 1e6:.1f} MB compressed, {dsize.sum() / 1e6:.1f} MB decoded",
        flush=True,
    )
    kernels = {
        "one thread per stream (global memory)": one_thread,
        "a warp per stream (lanes chained)": warp,
    }
    rng = np.random.default_rng(0)
    damaged = buf.copy()
    for k in rng.choice(len(src), 64, replace=False):
        at, n = int(src[k] + rng.integers(0, csize[k] - 64)), int(rng.integers(16, 65))
        damaged[at : at + n] = cp.asarray(rng.integers(0, 256, n, dtype=np.uint8))
    flagged = {}
    for name, fn in kernels.items():
        assert not len(fn(*batches[0])), f"{name}: D's streams must all be sound"
        flagged[name] = fn(damaged, src, csize, dsize)
    first = next(iter(flagged.values()))
    assert all(np.array_equal(f, first) for f in flagged.values()), {k: len(v) for k, v in flagged.items()}
    print(f"64 damaged streams: each kernel flags the same {len(first)}", flush=True)
    for name, fn in kernels.items():
        alone = median_seconds(fn, *batches[0])
        with ThreadPoolExecutor(16) as ex:
            together = median_seconds(lambda fn=fn: list(ex.map(lambda b: on_own_stream(fn, b), batches)))
        print(
            f"{name:40s} one task {alone * 1e3:7.2f} ms | 16 tasks on 16 threads {together * 1e3:7.2f} ms",
            flush=True,
        )
    out = cp.empty(int(dsize.sum()), dtype=np.uint8)
    dst = out.data.ptr + np.concatenate([[0], np.cumsum(dsize)[:-1]]).astype(np.uint64)
    srcp = buf.data.ptr + src.astype(np.uint64)
    stream = cp.cuda.get_current_stream()

    def decode() -> None:
        done = decompress.launch("lz4", srcp, csize, dst, dsize, stream)
        stream.synchronize()
        assert not done.failures()

    print(
        f"{'nvCOMP lz4 decode of the same streams':40s} one task {median_seconds(decode) * 1e3:7.2f} ms",
        flush=True,
    )


if __name__ == "__main__":
    main()
