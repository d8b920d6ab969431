"""Planning: which stored chunks a block needs and where each lands (pure functions, CPU-only)."""

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

import numpy as np
from dask.array.core import normalize_chunks
from dask.utils import parse_bytes

from . import config
from .errors import MetadataError
from .metadata import ArrayInfo


class ChunkPiece(NamedTuple):  # a tuple: a task of small chunks makes thousands
    """One stored chunk's contribution to a block.

    Attributes
    ----------
    coords
        The chunk's grid coordinates.
    chunk_sel
        The part of the chunk the block needs.
    block_sel
        Where that part lands in the block.
    """

    coords: tuple[int, ...]
    chunk_sel: tuple[slice, ...]
    block_sel: tuple[slice, ...]


class BlockRequest(NamedTuple):
    """One block that a task asks its backend for (``Backend.decode_many``).

    Attributes
    ----------
    info
        Its array.
    pieces
        The stored chunks it needs, and where each part lands.
    make
        Makes the empty C-order block, of the backend's array module; a backend calls it once, when
        it is ready to fill the block.
    """

    info: ArrayInfo
    pieces: Sequence[ChunkPiece]
    make: Callable[[], Any]


def block_pieces(start: tuple[int, ...], stop: tuple[int, ...], chunks: tuple[int, ...]) -> list[ChunkPiece]:
    """Every stored chunk overlapping the box ``[start, stop)``, with the overlap on both sides."""
    per_axis = []
    for lo, hi, c in zip(start, stop, chunks, strict=True):
        if hi <= lo:
            return []
        axis = []
        for i in range(lo // c, (hi - 1) // c + 1):
            a, b = max(lo, i * c), min(hi, (i + 1) * c)
            axis.append((i, slice(a - i * c, b - i * c), slice(a - lo, b - lo)))
        per_axis.append(axis)
    return [
        ChunkPiece(tuple(p[0] for p in combo), tuple(p[1] for p in combo), tuple(p[2] for p in combo))
        for combo in itertools.product(*per_axis)  # one empty combination for a 0-d array
    ]


def direct_offsets(
    pieces: list[ChunkPiece], block: tuple[int, ...], chunks: tuple[int, ...], itemsize: int
) -> np.ndarray:
    """For each piece, the byte offset in a C-order ``block`` where its whole chunk lies as one
    contiguous run, so that it can be decoded straight there; -1 where it cannot (a partial chunk,
    or rows of a chunk that the block's layout separates)."""
    out = np.full(len(pieces), -1, dtype=np.int64)
    # a whole chunk is contiguous in the block when its axes are ones, then one of any extent, then
    # whole axes of the block: the same for every whole chunk of the block
    k = next((d for d, c in enumerate(chunks) if c > 1), len(chunks))
    if any(chunks[d] != block[d] for d in range(k + 1, len(block))):
        return out
    whole_sel = tuple(slice(0, c) for c in chunks)
    whole = [i for i, p in enumerate(pieces) if p.chunk_sel == whole_sel]
    if whole:
        strides = [int(np.prod(block[d + 1 :], dtype=np.int64)) * itemsize for d in range(len(block))]
        starts = np.array([[s.start for s in pieces[i].block_sel] for i in whole], dtype=np.int64)
        out[whole] = starts @ np.array(strides, dtype=np.int64)
    return out


def block_chunks(
    chunks: object,
    shape: tuple[int, ...],
    stored: tuple[int, ...],
    dtype: np.dtype,
    default_size: str | int,
    array: str = "the array",
) -> tuple[tuple[int, ...], ...]:
    """Dask block sizes for an array of ``shape`` stored in chunks of ``stored``.

    ``chunks`` takes dask's forms (int, tuple, dict, "auto") and a byte size such as "512MiB";
    ``None`` means blocks of about ``default_size`` bytes. "auto", byte sizes and ``None`` give
    blocks that are whole multiples of the stored chunks, never smaller than one.

    Raises
    ------
    MetadataError
        The blocks would number more than ``max-blocks`` (the message names ``array``): counted
        before dask lists them, which for a shape from damaged metadata would not end.
    """
    if chunks is None or chunks == "auto":
        block = _aligned_block(shape, stored, dtype.itemsize, parse_bytes(default_size))
    elif isinstance(chunks, str):
        block = _aligned_block(shape, stored, dtype.itemsize, parse_bytes(chunks))
    else:
        _bound(_regular_block(chunks, shape), shape, array)
        return normalize_chunks(chunks, shape, dtype=dtype)
    _bound(block, shape, array)
    return normalize_chunks(block, shape)


def _aligned_block(
    shape: tuple[int, ...], stored: tuple[int, ...], itemsize: int, limit: int
) -> tuple[int, ...]:
    # grow whole stored chunks from the last axis to the first, keeping each block contiguous-ish
    block = [min(c, s) if s else c for c, s in zip(stored, shape, strict=True)]
    for axis in reversed(range(len(shape))):
        other = itemsize * math.prod(b for i, b in enumerate(block) if i != axis)
        n = max(limit // max(other * stored[axis], 1), 1)
        block[axis] = min(n * stored[axis], max(shape[axis], 1))
        if n * stored[axis] < shape[axis]:
            break
    return tuple(block)


def _regular_block(chunks: object, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The block shape of dask's regular forms (an int; a tuple or dict of ints, -1 or None), or None
    for the others (explicit block sizes, which list themselves already)."""
    per: list[object]
    if isinstance(chunks, int) and not isinstance(chunks, bool):
        per = [chunks] * len(shape)
    elif isinstance(chunks, dict):
        per = [chunks.get(i, chunks.get(i - len(shape), -1)) for i in range(len(shape))]
    elif isinstance(chunks, tuple | list) and len(chunks) == len(shape):
        per = list(chunks)
    else:
        return None
    if not all(c is None or (isinstance(c, int) and not isinstance(c, bool)) for c in per):
        return None
    sizes = cast(list[int | None], per)
    return tuple(s if c is None or c == -1 else c for c, s in zip(sizes, shape, strict=True))


def _bound(block: tuple[int, ...] | None, shape: tuple[int, ...], array: str) -> None:
    if block is None or any(b <= 0 for b in block):
        return  # dask's own errors for what it refuses
    count = math.prod(-(-s // b) for s, b in zip(shape, block, strict=True))
    most = config.integer("max-blocks")
    if count > most:
        raise MetadataError(
            f"{array}: shape {shape} in blocks of {block} makes {count} dask blocks, more than "
            f"zarr_dask_gpu.max-blocks ({most}): pass larger chunks=, or raise the setting"
        )


def decode_calls(out_sizes: np.ndarray, limit: int | str | None) -> list[np.ndarray]:
    """The items of a decode batch split into consecutive calls of about ``limit`` decoded bytes (by
    the multiple of ``limit`` their last byte falls under: a call exceeds it by less than one item);
    one call when there is no limit."""
    if limit is None:
        return [np.arange(len(out_sizes))]
    cut = (np.cumsum(out_sizes) - 1) // max(parse_bytes(limit), 1)
    starts = np.flatnonzero(np.diff(cut, prepend=-1))
    return np.split(np.arange(len(out_sizes)), starts[1:])


def read_groups(sizes: list[int | None], limit: int) -> list[list[int]]:
    """Consecutive read units (``sizes``: their stored bytes; None where missing, -1 where unknown
    until read) in groups of about ``limit`` stored bytes, each group read before its decode starts
    while the next one reads. Units of unknown size (whole remote objects, whose reads wait on the
    network rather than the disk) are read all at once: one group."""
    if any(n is not None and n < 0 for n in sizes):
        return [list(range(len(sizes)))] if sizes else []
    groups: list[list[int]] = []
    total = limit
    for i, n in enumerate(sizes):
        if total >= limit:
            groups.append([])
            total = 0
        groups[-1].append(i)
        total += n or 0
    return groups
