"""blosc1 frames on the GPU.

Headers are checked on the host (one 16-byte gather per batch); a kernel walks the frames' block
tables and split headers into a table of inner streams, a thread a block; the streams are
structure-checked and decoded in one batch (lz4 blocks by nvCOMP, zstd frames by this package's
kernels, zlib streams by zlib), stored streams are copied, and a second kernel undoes the byte or
bit shuffle of every block. Blosc's own format rules are c-blosc 1.x's (blosc_d): a block is split
into ``typesize`` streams unless the frame forbids it, the block is the last, partial one,
``typesize > 16`` or a stream would be under 128 bytes; a stream whose size equals its decoded size
is stored; bit shuffle applies to blocks of a multiple of 8 elements only.
"""

import functools
from collections.abc import Callable

import cupy as cp
import numpy as np

from ... import phases
from ...codecs.headers import blosc_layout, check_blosc
from ...phases import Phase
from .. import kernels
from ..runtime import transfer
from ..runtime.gather import copy_ranges
from .items import Items

_THREADS = 256
# blocks up to this size are unshuffled in place, through shared memory (three thread blocks an SM at
# most); larger ones from a scratch of the output's size that the inner streams decode into
_IN_PLACE_MAX = 64 << 10


def _unusual(heads: np.ndarray, compcode: int) -> np.ndarray:
    """Which checked blosc1 headers (rows of 16 bytes) these kernels leave to c-blosc: another codec or
    codec version than the metadata's, a format version other than c-blosc 1.x's 2 (which it refuses),
    reserved flags, blocks larger than the frame, or blocks not a multiple of the type size (c-blosc
    then leaves bytes of each split block unwritten)."""
    flags, versionlz = heads[:, 2].astype(np.int64), heads[:, 1]
    words = heads[:, 4:16].copy().view("<i4").astype(np.int64)
    nbytes, blocksize = words[:, 0], words[:, 1]
    typesize = np.maximum(heads[:, 3].astype(np.int64), 1)
    copied = (flags & 2) > 0
    return (
        ((flags >> 5) != compcode) & ~copied
        | (versionlz != 1) & ~copied
        | (heads[:, 0] != 2)
        | ((flags & 0x08) > 0)
        | (blocksize > np.maximum(nbytes, 1))
        | (blocksize % typesize != 0) & ~copied
    )


def _module() -> cp.RawModule:
    return kernels.module("blosc.cu")


def _blocks(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ``counts[i]`` blocks of frame i: each block's frame, and its index in the frame."""
    c = np.repeat(np.arange(len(counts)), counts)
    return c, np.arange(len(c)) - np.repeat(np.cumsum(counts) - counts, counts)


def decode_batch(
    buffer: cp.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
    expected: int,
    out: cp.ndarray,
    out_offsets: np.ndarray,
    compcode: int,
    decode_streams: Callable[[Items], list[tuple[int, str]]],
) -> list[tuple[int, str]]:
    """Decode a batch of blosc frames whose streams are of c-blosc's ``compcode`` into ``out`` at
    ``out_offsets``; the damaged ones as (index, reason), with nothing decoded, when there are any.
    Headers that c-blosc may read otherwise than these kernels (``_unusual``) are refused: the backend
    hands those frames to c-blosc on the host.

    ``decode_streams(items)`` checks and decodes the compressed inner streams (their decoder is the
    backend's), each owned by its frame's index, returning failures as (frame index, reason).
    """
    n = len(offsets)
    with phases.record(Phase.FRAMES, chunks=n):
        walked = _walk(buffer, offsets, sizes, expected, out_offsets, compcode)
    if isinstance(walked, list):
        return walked
    h, (src, csize, dst, dsize), shuffles, largest = walked
    in_place = largest <= _IN_PLACE_MAX
    target = out if shuffles is None or in_place else cp.empty_like(out)
    unit = np.repeat(np.arange(n), h["rows"])
    stored = csize == dsize
    if stored.any():
        k = np.flatnonzero(stored)
        copy_ranges(buffer, src[k], dst[k], dsize[k], target)
    k = np.flatnonzero(~stored)
    if len(k):
        to = np.uint64(target.data.ptr) + dst[k].astype(np.uint64)
        failed = decode_streams(Items(buffer, src[k], csize[k], to, dsize[k].astype(np.int64), unit[k]))
        if failed:
            return failed
    if shuffles is not None:
        m = len(shuffles) // 4
        cols = (shuffles[q * m : (q + 1) * m] for q in range(4))
        if in_place:
            room = -(-largest // 16) * 16
            _in_place(cp.cuda.Device().id)((m,), (_THREADS,), (out, *cols), shared_mem=room)
        else:
            _module().get_function("unshuffle")((m,), (_THREADS,), (target, out, *cols))
    return []


@functools.cache
def _in_place(device: int) -> cp.RawKernel:
    """The in-place unshuffle kernel on ``device``, let take shared memory for blocks of ``_IN_PLACE_MAX``."""
    kernel = _module().get_function("unshuffle_in_place")
    kernel.max_dynamic_shared_size_bytes = _IN_PLACE_MAX
    return kernel


def _walk(
    buffer: cp.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
    expected: int,
    out_offsets: np.ndarray,
    compcode: int,
) -> list[tuple[int, str]] | tuple[dict[str, np.ndarray], list[np.ndarray], cp.ndarray | None, int]:
    """The frames' headers checked (the damaged as (index, reason), when there are any), then their
    block tables walked: the headers' fields (``blosc_layout``) and each inner stream's source offset,
    compressed size, destination offset and decoded size; on the device, the unshuffle kernel's
    columns (``_shuffles``), None when no block is shuffled; and the largest shuffled block's bytes. Its
    inputs go to the device in one copy and its table and statuses come back in one, each by a kernel
    over the bus (``transfer``)."""
    n = len(offsets)
    stream = cp.cuda.get_current_stream()
    offsets_d, pinned = transfer.upload([offsets], np.int64)  # kept until the stream has passed it
    heads = transfer.read(buffer[offsets_d[:, None] + cp.arange(16)], stream)
    bad = [(i, why) for i in range(n) if (why := check_blosc(bytes(heads[i]), int(sizes[i]), expected))]
    odd = set(np.flatnonzero(_unusual(heads, compcode)).tolist()) - {i for i, _ in bad}
    bad += [(i, "a blosc header these kernels do not take") for i in sorted(odd)]
    if bad:
        return sorted(bad)
    h = blosc_layout(heads)
    sizes = h["ctbytes"]  # the frame's own bytes: what follows them is not blosc's (older z5py pads)
    row0 = np.concatenate([[0], np.cumsum(h["rows"])[:-1]]).astype(np.int64)
    total = int(h["rows"].sum())
    # a thread a block, but one for a frame stored as is (its one row, whatever its blocks)
    c, j = _blocks(np.where(h["flags"] & 2, 1, h["nblocks"]))
    # the unshuffle kernel's columns ride with this upload, which the host waits for below: a DMA copy
    # would queue behind the other tasks' reads in the copy engines
    shuffles_host = _shuffles(h, out_offsets)
    ins, pinned = transfer.upload([sizes, row0, out_offsets, c, j, shuffles_host], np.int64)
    sizes_d, row0_d, out0_d = (ins[k * n : (k + 1) * n] for k in range(3))
    c_d, j_d = ins[3 * n : 3 * n + len(c)], ins[3 * n + len(c) : 3 * n + 2 * len(c)]
    outs = cp.zeros(4 * total + n, dtype=np.int64)  # the table's four columns, then a word a status
    table = [outs[k * total : (k + 1) * total] for k in range(4)]
    status = outs[4 * total :].view(np.int32)  # the kernel's statuses: its first n
    if len(c):
        _module().get_function("streams")(
            ((len(c) + _THREADS - 1) // _THREADS,),
            (_THREADS,),
            (buffer, offsets_d, sizes_d, row0_d, out0_d, *table, c_d, j_d, status, np.int64(len(c))),
        )
    got = transfer.read(outs, stream)
    del pinned  # the stream has passed the uploads
    st = got[4 * total :].view(np.int32)[:n]
    if st.any():
        return [(int(i), "corrupt blosc block table or split headers") for i in np.flatnonzero(st)]
    shuffles = ins[len(ins) - len(shuffles_host) :] if len(shuffles_host) else None
    m = len(shuffles_host) // 4
    largest = int(shuffles_host[m : 2 * m][shuffles_host[3 * m :] > 0].max()) if m else 0
    return h, [got[k * total : (k + 1) * total] for k in range(4)], shuffles, largest


def _shuffles(h: dict[str, np.ndarray], out_offsets: np.ndarray) -> np.ndarray:
    """The unshuffle kernel's columns, end to end: each block's offset in the output, its size, the
    frame's type size and shuffle (1 byte, 2 bit, 0 none); empty when no block is shuffled. As c-blosc,
    byte shuffle (for type sizes over 1) wins over bit shuffle, and frames stored as is are not
    shuffled."""
    byte = ((h["flags"] & 1) > 0) & (h["typesize"] > 1)
    shuffled = ((h["flags"] & 2) == 0) & (byte | ((h["flags"] & 4) > 0))
    if not shuffled.any():
        return np.zeros(0, np.int64)
    c, j = _blocks(h["nblocks"])
    bs = h["blocksize"][c]
    start = np.asarray(out_offsets, dtype=np.int64)[c] + j * bs
    mode = np.where(shuffled, np.where(byte, 1, 2), 0)
    return np.concatenate([start, np.minimum(bs, h["nbytes"][c] - j * bs), h["typesize"][c], mode[c]])
