"""blosc's inner lz4 streams (dataset D) on the GPU: the package's one pass that checks and decodes
each stream with a warp (``validate.decode_lz4``) against nvCOMP's lz4 decode of the same streams
(which the pipeline used after a check pass of the same walk), alone and with 16 threads at once.
Both must decode D's streams to the same bytes; ours must flag the streams of a copy with 64 of them
damaged (random bytes written over 16 to 64 bytes of each).

Run on the GPU host after `zarr-dask-gpu bench --datasets D` wrote dataset D:
    python3 benchmarks/probe_check.py [--path /tmp/bench-a.zarr-D]
"""

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np

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


def ours(
    buf: cp.ndarray, src: np.ndarray, csize: np.ndarray, dsize: np.ndarray, out: cp.ndarray
) -> np.ndarray:
    """The package's one pass: each stream checked and decoded by a warp (``validate.decode_lz4``)."""
    dst = np.uint64(out.data.ptr) + np.concatenate([[0], np.cumsum(dsize)[:-1]]).astype(np.uint64)
    bad = validate.decode_lz4(buf, src, csize, "lz4-block", dst, dsize)
    return np.array([i for i, _ in bad], dtype=np.int64)


def nvcomp(
    buf: cp.ndarray, src: np.ndarray, csize: np.ndarray, dsize: np.ndarray, out: cp.ndarray
) -> np.ndarray:
    """nvCOMP's lz4 decode of the same streams (no check: it does not bound its output)."""
    dst = np.uint64(out.data.ptr) + np.concatenate([[0], np.cumsum(dsize)[:-1]]).astype(np.uint64)
    stream = cp.cuda.get_current_stream()
    done = decompress.launch(
        "lz4", np.uint64(buf.data.ptr) + src.astype(np.uint64), csize, dst, dsize, stream
    )
    stream.synchronize()
    return np.array([i for i, _ in done.failures()], dtype=np.int64)


def on_own_stream(fn, batch: tuple) -> None:  # type: ignore[no-untyped-def]
    with cp.cuda.Stream(non_blocking=True) as s:
        fn(*batch)
        s.synchronize()


def timed(fn, *a, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    fn(*a)
    ts = []
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn(*a)
        cp.cuda.Device().synchronize()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


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
    outs = [cp.empty(int(b[3].sum()), dtype=np.uint8) for b in batches]
    kernels = {"check and decode, a warp per stream (ours)": ours, "nvCOMP lz4 decode": nvcomp}
    results = {}
    for name, fn in kernels.items():
        outs[0].fill(0)
        assert not len(fn(*batches[0], outs[0])), f"{name}: D's streams must all be sound"
        results[name] = outs[0].copy()
    first = next(iter(results.values()))
    assert all(cp.array_equal(r, first) for r in results.values()), "decoded bytes differ"
    print("D's streams: ours and nvCOMP decode to the same bytes", flush=True)
    rng = np.random.default_rng(0)
    damaged = buf.copy()
    for k in rng.choice(len(src), 64, replace=False):
        at, n = int(src[k] + rng.integers(0, csize[k] - 64)), int(rng.integers(16, 65))
        damaged[at : at + n] = cp.asarray(rng.integers(0, 256, n, dtype=np.uint8))
    print(f"64 damaged streams: ours flags {len(ours(damaged, src, csize, dsize, outs[0]))}", flush=True)
    work = [(*b, o) for b, o in zip(batches, outs, strict=True)]
    for name, fn in kernels.items():
        alone = timed(fn, *work[0])
        with ThreadPoolExecutor(16) as ex:
            together = timed(lambda fn=fn: list(ex.map(lambda w, fn=fn: on_own_stream(fn, w), work)))
        print(
            f"{name:45s} one task {alone * 1e3:7.2f} ms | 16 tasks on 16 threads {together * 1e3:7.2f} ms",
            flush=True,
        )


if __name__ == "__main__":
    main()
