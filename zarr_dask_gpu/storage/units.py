"""Where each read unit's bytes are: whole chunk files, or byte ranges inside shards.

A shard's index is read with one small pread per shard, verified (crc32c, bounds, overflow), and
turned into one range per inner chunk. Ranges are then merged into few large reads (``coalesce``).
"""

from collections import defaultdict
from collections.abc import Sequence
from enum import IntEnum
from typing import NamedTuple

import google_crc32c
import numpy as np
from zarr.abc.store import RangeByteRequest, SuffixByteRequest

from .. import config
from ..errors import ChunkDecodeError
from ..metadata import ArrayInfo

_EMPTY = np.uint64(2**64 - 1)


class Source(IntEnum):
    """Who reads a range's bytes: what its ``path`` names."""

    FILE = 0  # a local file: native preads, kvikio CuFile on the GPU
    URL = 1  # a remote object: the store's fsspec filesystem, or kvikio.RemoteFile on the GPU
    KEY = 2  # a key of the store's zarr ``Store``: its async ``get`` (``Store.fetch``)


class Range(NamedTuple):  # a tuple: built per chunk on the hot path, where a frozen dataclass costs 3x
    """``size`` bytes at ``offset`` of ``path``: a local file, a URL or a store key, as ``source``
    says. A size of -1 is the whole object, its size unknown until read."""

    path: str
    offset: int
    size: int
    source: Source = Source.FILE


def locate(info: ArrayInfo, coords: Sequence[tuple[int, ...]]) -> list[Range | None]:
    """The bytes of each read unit in ``coords``; None where it is missing (or an empty inner chunk).

    Unsharded chunks are whole objects, as the store locates them (``Store.whole``): a remote one has
    size -1, and whether it exists is found by reading it.
    """
    if info.shard is None:
        return info.store.whole([info.chunk_path(c) for c in coords])
    out: list[Range | None] = [None] * len(coords)
    by_shard: dict[tuple[int, ...], list[int]] = defaultdict(list)
    per = info.per_shard
    for i, c in enumerate(coords):
        by_shard[tuple(x // n for x, n in zip(c, per, strict=True))].append(i)
    for members in by_shard.values():
        first = coords[members[0]]
        index = read_shard_index(info, first)
        if index is None:
            continue
        path, entries = index
        stored: list[tuple[int, tuple[int, int]]] = []
        for i in members:
            inner = tuple(x % n for x, n in zip(coords[i], per, strict=True))
            off, size = (int(v) for v in entries[inner])
            if off != int(_EMPTY):
                stored.append((i, (off, size)))
        for (i, _), r in zip(stored, info.store.parts(path, [span for _, span in stored]), strict=True):
            out[i] = r
    return out


def native_threads(files: int) -> int:
    """Threads for a native batch of ``files`` files: ``cpu-threads``, at least four files each."""
    return max(1, min(config.cpu_threads(), -(-files // 4)))


def read_shard_index(info: ArrayInfo, coords: tuple[int, ...]) -> tuple[str, np.ndarray] | None:
    """The verified index of the shard holding read unit ``coords``: (offset, size) per inner chunk,
    shaped like the inner grid, or None when the shard does not exist.

    Raises
    ------
    ChunkDecodeError
        The index is truncated, fails its checksum, or an entry points outside the shard's data.
    """
    assert info.shard is not None
    path, key = info.chunk_path(coords), info.chunk_key(coords)
    n = int(np.prod(info.per_shard))
    nbytes = 16 * n + (4 if info.shard.checksum else 0)
    request = RangeByteRequest(0, nbytes) if info.shard.index_at_start else SuffixByteRequest(nbytes)
    found = info.store.read_range(path, request)
    if found is None:
        return None
    size, raw = found
    if size < nbytes:
        raise ChunkDecodeError(
            info.location, key, f"shard index truncated: {size} bytes, index needs {nbytes}"
        )
    if len(raw) > nbytes:  # a whole file for a byte range: the server ignores HTTP Range requests
        raise ChunkDecodeError(
            info.location,
            key,
            f"the server sent {len(raw)} bytes for a {nbytes}-byte range of the shard: it ignores byte-range "
            "(HTTP Range) requests, which reading sharded arrays needs",
        )
    if len(raw) != nbytes:
        raise ChunkDecodeError(
            info.location, key, f"short read of the shard index ({len(raw)} of {nbytes} bytes)"
        )
    if info.shard.checksum and google_crc32c.value(raw[:-4]) != int.from_bytes(raw[-4:], "little"):
        raise ChunkDecodeError(info.location, key, "shard index checksum (crc32c) does not match")
    entries = np.frombuffer(raw, dtype="<u8", count=2 * n).reshape((*info.per_shard, 2))
    off, length = entries[..., 0], entries[..., 1]
    empty = (off == _EMPTY) & (length == _EMPTY)
    lo, hi = (nbytes, size) if info.shard.index_at_start else (0, size - nbytes)
    with np.errstate(over="ignore"):
        end = off + length
    bad = ~empty & ((end < off) | (off < lo) | (end > hi))
    if bad.any():
        inner = tuple(int(i) for i in np.argwhere(bad)[0])
        o, m = int(off[inner]), int(length[inner])
        raise ChunkDecodeError(
            info.location,
            key,
            f"inner chunk {inner}: index entry ({o}, {m}) lies outside the shard's data [{lo}, {hi})",
        )
    return path, entries


class Read(NamedTuple):
    """One pread covering several ranges of one file: ``members`` are (unit index, offset in the read)."""

    path: str
    offset: int
    size: int
    members: tuple[tuple[int, int], ...]


def coalesce(ranges: Sequence[Range | None], gap: int | None = None, limit: int | None = None) -> list[Read]:
    """Merge ranges of the same file whose gap is at most ``gap`` bytes into reads of at most ``limit``
    bytes (a single range larger than ``limit`` is read alone). Defaults: ``zarr_dask_gpu.coalesce-gap``
    and ``coalesce-limit``."""
    gap = config.nbytes("coalesce-gap") if gap is None else gap
    limit = config.nbytes("coalesce-limit") if limit is None else limit
    items = sorted((r.path, r.offset, r.size, i) for i, r in enumerate(ranges) if r is not None)
    reads: list[Read] = []
    k = 0
    while k < len(items):  # one loop over plain tuples: a store of small chunks has thousands of ranges
        path, start, size, i = items[k]
        end, members = start + size, [(i, 0)]
        k += 1
        while k < len(items):
            p, o, n, j = items[k]
            if p != path or o - end > gap or max(end, o + n) - start > limit:
                break
            members.append((j, o - start))
            end = max(end, o + n)
            k += 1
        reads.append(Read(path, start, end - start, tuple(members)))
    return reads
