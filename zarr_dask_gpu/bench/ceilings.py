"""The hardware ceilings the bench's rows are measured against, on a dataset's own chunk files:
kvikio's multi-threaded raw read of every file, one batched zstd decode of every chunk already on the
device (nvCOMP's, or this package's kernels), one batched decode of every inner stream of every
blosc frame, nvCOMP's batched Deflate or LZ4 over every chunk's one stream, the host's decode of them
alone on its pool, and a pinned host-to-device copy. Each maker returns a body to time, holding its
buffers until it is dropped. kvikio and cupy are imported when one is made."""

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


def _batched(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    decoder: str,
    buffers: tuple[Any, ...],
) -> Callable[[], None]:
    """Body: one ``decompress.launch`` of items ``compression`` at device addresses ``src`` into
    ``dst`` with ``zstd-decoder`` ``decoder``, waited for; it raises if an item fails. It holds
    ``buffers``, which the addresses point into."""
    import cupy as cp

    from ..gpu.decoders import decompress
    from .timing import settings

    stream = cp.cuda.Stream(non_blocking=True)

    def run() -> None:
        with stream, settings({"zstd-decoder": decoder}):
            done = decompress.launch(compression, src, src_sizes, dst, dst_sizes, stream)
            stream.synchronize()
            assert not done.failures(), done.failures()[:3]

    run.buffers = buffers  # type: ignore[attr-defined]
    return run


def zstd_decode(files: Sequence[str], chunk_nbytes: int, decoder: str) -> tuple[Callable[[], None], Any]:
    """Body: one batched decode of every zstd chunk file (read to the device first) with ``decoder``
    (``zstd-decoder``: "nvcomp" or "blocks"), scratch sized from the data as a task's is; and the
    output buffer, chunk ``i`` at ``i * chunk_nbytes``. It raises if a chunk fails to decode."""
    import cupy as cp

    sizes, offs = layout(files)
    comp = compressed(files)
    kvikio_read_all(files, comp)
    out = cp.empty(chunk_nbytes * len(files), dtype=np.uint8)
    src = np.uint64(comp.data.ptr) + offs[:-1].astype(np.uint64)
    dst = np.uint64(out.data.ptr) + np.arange(len(files), dtype=np.uint64) * np.uint64(chunk_nbytes)
    dst_sizes = np.full(len(files), chunk_nbytes)
    return _batched("zstd", src, sizes, dst, dst_sizes, decoder, (comp, out)), out


# each serial stream's bytes before and after its payload, which nvCOMP decodes: zlib's header and
# Adler-32 around a raw Deflate stream; numcodecs lz4's 4-byte size before one lz4 block
_WRAPPERS = {"zlib": (2, 4), "lz4": (4, 0)}


def stream_decode(
    files: Sequence[str], chunk_nbytes: int, compression: str
) -> tuple[Callable[[], None], Any]:
    """Body: nvCOMP's batched decode of every chunk file's one stream (zlib: its raw Deflate stream;
    lz4: its one block), read to the device and each gathered to an aligned offset (nvCOMP's rule),
    in one call, waited for; and the output buffer, chunk ``i`` at ``i * chunk_nbytes``. nvCOMP is
    not hardened against damaged streams: a figure for trusted data, not a path of the package."""
    import cupy as cp

    from ..gpu.decoders import decompress
    from ..gpu.runtime.gather import aligned

    head, tail = _WRAPPERS[compression]
    sizes, offs = layout(files)
    comp = compressed(files)
    kvikio_read_all(files, comp)
    raw, starts = aligned(comp, offs[:-1] + head, sizes - head - tail, _ALIGN)
    out = cp.empty(chunk_nbytes * len(files), dtype=np.uint8)
    src = np.uint64(raw.data.ptr) + starts.astype(np.uint64)
    dst = np.uint64(out.data.ptr) + np.arange(len(files), dtype=np.uint64) * np.uint64(chunk_nbytes)
    dst_sizes = np.full(len(files), chunk_nbytes)
    stream = cp.cuda.Stream(non_blocking=True)

    def run() -> None:
        with stream:
            done = decompress.nvcomp(compression, src, sizes - head - tail, dst, dst_sizes, stream)
            stream.synchronize()
            assert not done.failures(), done.failures()[:3]

    run.buffers = (comp, raw, out)  # type: ignore[attr-defined]
    return run, out


def host_decode(files: Sequence[str], chunk_nbytes: int, compression: str) -> tuple[Callable[[], None], Any]:
    """Body: the GPU path's host decode alone: every chunk file's stream (its bytes already in memory)
    decoded by the reference library on the process's pool of ``cpu-threads`` into one pinned buffer,
    as the GPU path's host decode does, nothing copied to the device; and that buffer, chunk ``i`` at
    ``i * chunk_nbytes``."""
    import cupyx

    from ..backends import decode_pool
    from ..codecs.compressions import decode_into

    stored = []
    for f in files:
        with open(f, "rb") as fh:
            stored.append(fh.read())
    out = cupyx.empty_pinned(chunk_nbytes * len(files), dtype=np.uint8)

    def one(i: int) -> None:
        why = decode_into(compression, stored[i], out[i * chunk_nbytes : (i + 1) * chunk_nbytes])
        assert why is None, why

    def run() -> None:
        list(decode_pool().map(one, range(len(files))))

    return run, out


def blosc_streams(frame: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The compressed inner streams of a sound blosc1 frame, by c-blosc 1.x's layout (a block table,
    then each block's streams, each after its 4-byte size): their offsets in the frame, sizes and
    decoded sizes. Stored streams (size = decoded size) are left out: nothing decodes them."""
    from ..codecs.headers import blosc_layout

    lay = {k: int(v[0]) for k, v in blosc_layout(np.frombuffer(frame[:16], np.uint8)[None]).items()}
    assert not lay["flags"] & 2, "a copy-only frame has no streams"
    nbytes, bs, nblocks = lay["nbytes"], lay["blocksize"], lay["nblocks"]
    splits = lay["typesize"] if lay["split"] else 1
    starts = np.frombuffer(frame, "<i4", nblocks, 16)
    offs, sizes, decoded = [], [], []
    for b in range(nblocks):
        size = min(bs, nbytes - b * bs)
        parts = splits if size == bs else 1  # the last, partial block is never split
        p = int(starts[b])
        for _ in range(parts):
            n = int.from_bytes(frame[p : p + 4], "little", signed=True)
            if n != size // parts:
                offs.append(p + 4)
                sizes.append(n)
                decoded.append(size // parts)
            p += 4 + n
    return np.array(offs, np.int64), np.array(sizes, np.int64), np.array(decoded, np.int64)


def blosc_decode(
    files: Sequence[str], streams: str, decoder: str
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Body: one batched decode of every compressed inner stream of every blosc frame file (copied
    to the device first), compression ``streams`` (the blosc row's inner one) with ``zstd-decoder``
    ``decoder``; and a check that the first and last stream equal the reference library's decode of
    them. The body raises if a stream fails to decode."""
    import cupy as cp

    from ..codecs import compressions

    _, offs = layout(files)
    host = np.zeros(int(offs[-1]), dtype=np.uint8)
    src, sizes, dsizes, raw = [], [], [], []
    for f, base in zip(files, offs[:-1], strict=True):
        with open(f, "rb") as fh:
            frame = fh.read()
        host[base : base + len(frame)] = np.frombuffer(frame, np.uint8)
        o, n, d = blosc_streams(frame)
        src.append(o + base)
        sizes.append(n)
        dsizes.append(d)
        raw += [frame[o[0] : o[0] + n[0]], frame[o[-1] : o[-1] + n[-1]]] if len(o) else []
    comp = cp.asarray(host)
    src_offs, src_sizes, dst_sizes = np.concatenate(src), np.concatenate(sizes), np.concatenate(dsizes)
    dst_offs = np.concatenate([[0], np.cumsum(dst_sizes)[:-1]])
    out = cp.empty(int(dst_sizes.sum()), dtype=np.uint8)
    src_ptr = np.uint64(comp.data.ptr) + src_offs.astype(np.uint64)
    dst_ptr = np.uint64(out.data.ptr) + dst_offs.astype(np.uint64)

    def check() -> None:
        for data, at, n in ((raw[0], 0, dst_sizes[0]), (raw[-1], dst_offs[-1], dst_sizes[-1])):
            want = np.empty(int(n), np.uint8)
            assert compressions.decode_into(streams, data, want) is None
            assert np.array_equal(out[int(at) : int(at) + int(n)].get(), want), "inner streams differ"

    return _batched(streams, src_ptr, src_sizes, dst_ptr, dst_sizes, decoder, (comp, out)), check


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
