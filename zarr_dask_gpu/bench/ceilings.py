"""The hardware ceilings the bench's rows are measured against, on a dataset's own chunk files:
kvikio's multi-threaded raw read of every file, one batched zstd decode of every chunk already on the
device (nvCOMP's, or this package's kernels), and a pinned host-to-device copy. Each maker returns a
body to time, holding its buffers until it is dropped. kvikio and cupy are imported when one is made."""

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

_ALIGN = 16  # each file at a 16-byte aligned offset, as the pipeline stages them for nvCOMP


def layout(files: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each file's size, and its offset in a buffer holding all of them aligned (and the total last)."""
    sizes = np.array([os.path.getsize(f) for f in files], dtype=np.int64)
    return sizes, np.cumsum([0, *((sizes + _ALIGN - 1) // _ALIGN * _ALIGN)])


def kvikio_read_all(files: Sequence[str], into: Any) -> None:
    """The raw read ceiling: every file at once by kvikio's threads into the device buffer ``into``,
    each at a 16-byte aligned offset (``into`` holds their rounded-up sizes)."""
    import kvikio

    sizes, offs = layout(files)
    handles = [kvikio.CuFile(f, "r") for f in files]
    futs = [h.pread(into[o : o + s], s, 0) for h, o, s in zip(handles, offs[:-1], sizes, strict=True)]
    for fu in futs:
        fu.get()
    for h in handles:
        h.close()


def kvikio_threads() -> int:
    import kvikio

    return int(kvikio.defaults.get("num_threads"))


def compressed(files: Sequence[str]) -> Any:
    """A device buffer for every file, laid out as ``kvikio_read_all`` reads them."""
    import cupy as cp

    return cp.empty(int(layout(files)[1][-1]), dtype=np.uint8)


def raw_read(files: Sequence[str]) -> Callable[[], None]:
    """Body: ``kvikio_read_all`` of ``files`` into a buffer of its own (read once when made)."""
    into = compressed(files)

    def run() -> None:
        kvikio_read_all(files, into)

    run()
    return run


def zstd_decode(files: Sequence[str], chunk_nbytes: int, decoder: str) -> tuple[Callable[[], None], Any]:
    """Body: one batched decode of every zstd chunk file (read to the device first) with ``decoder``
    (``zstd-decoder``: "nvcomp" or "blocks"), scratch sized from the data as a task's is; and the
    output buffer, chunk ``i`` at ``i * chunk_nbytes``. It raises if a chunk fails to decode."""
    import cupy as cp
    import dask

    from ..gpu import decompress

    sizes, offs = layout(files)
    comp = compressed(files)
    kvikio_read_all(files, comp)
    out = cp.empty(chunk_nbytes * len(files), dtype=np.uint8)
    src = np.uint64(comp.data.ptr) + offs[:-1].astype(np.uint64)
    dst = np.uint64(out.data.ptr) + np.arange(len(files), dtype=np.uint64) * np.uint64(chunk_nbytes)
    stream = cp.cuda.Stream(non_blocking=True)

    def run() -> None:
        with stream, dask.config.set({"zarr_dask_gpu.zstd-decoder": decoder}):
            done = decompress.launch("zstd", src, sizes, dst, np.full(len(files), chunk_nbytes), stream)
            stream.synchronize()
            assert not done.failures(), done.failures()[:3]

    run.buffers = (comp, out)  # type: ignore[attr-defined]  # the addresses above point into them
    return run, out


def h2d(nbytes: int = 1 << 30) -> Callable[[], None]:
    """Body: a copy of ``nbytes`` from pinned host memory to the device, waited for."""
    import cupy as cp

    host = cp.cuda.alloc_pinned_memory(nbytes)
    hbuf = np.frombuffer(host, dtype=np.uint8, count=nbytes)
    dbuf = cp.empty(nbytes, dtype=np.uint8)

    def run() -> None:
        dbuf.set(hbuf)
        cp.cuda.Device().synchronize()

    run.buffers = (host, dbuf)  # type: ignore[attr-defined]
    return run
