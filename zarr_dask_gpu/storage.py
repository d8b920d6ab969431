"""Where each read unit's bytes are: whole chunk files, or byte ranges inside shards.

A shard's index is read with one small pread per shard, verified (crc32c, bounds, overflow), and
turned into one range per inner chunk. Ranges are then merged into few large reads (``coalesce``).
"""

import os
import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

import fsspec
import google_crc32c
import numpy as np
from dask.base import tokenize

from . import _preads, config
from .errors import ChunkDecodeError
from .metadata import ArrayInfo
from .retry import as_oserror, retrying

_EMPTY = np.uint64(2**64 - 1)


class Range(NamedTuple):  # a tuple: built per chunk on the hot path, where a frozen dataclass costs 3x
    """``size`` bytes at ``offset`` in the file ``path``."""

    path: str
    offset: int
    size: int


_filesystems: dict[str, Any] = {}
_fs_lock = threading.Lock()


def filesystem(info: ArrayInfo) -> Any:
    """The fsspec filesystem of a remote array, one per process and set of storage options."""
    key = tokenize(info.root.split("://")[0], info.storage_options)
    with _fs_lock:
        if key not in _filesystems:
            _filesystems[key] = fsspec.core.url_to_fs(info.root, **(info.storage_options or {}))[0]
        return _filesystems[key]


def locate(info: ArrayInfo, coords: Sequence[tuple[int, ...]]) -> list[Range | None]:
    """The bytes of each read unit in ``coords``; None where it is missing (or an empty inner chunk).

    A remote unsharded chunk is the whole object (size -1): whether it exists is found by reading it.
    """
    if info.shard is None:
        if info.remote:
            return [Range(info.chunk_path(c), 0, -1) for c in coords]
        return _whole_files([info.chunk_path(c) for c in coords])
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
        for i in members:
            inner = tuple(x % n for x, n in zip(coords[i], per, strict=True))
            off, size = (int(v) for v in entries[inner])
            if off != int(_EMPTY):
                out[i] = Range(path, off, size)
    return out


def native_threads(files: int) -> int:
    """Threads for a native batch of ``files`` files: ``cpu-threads``, at least four files each."""
    return max(1, min(config.cpu_threads(), -(-files // 4)))


def _whole_files(paths: list[str]) -> list[Range | None]:
    """Each file whole, None where it does not exist: sized in one native batch without the GIL (a
    stat each from Python cost 8 us a file of dataset B's 4096)."""
    sizes = np.empty(len(paths), dtype=np.int64)
    errors = np.zeros(len(paths), dtype=np.int32)
    _preads.sizes(paths, sizes, errors, native_threads(len(paths)))
    if errors.any():  # other than a missing file: a directory where a chunk should be, permissions
        k = int(np.flatnonzero(errors)[0])
        raise OSError(int(errors[k]), os.strerror(int(errors[k])), paths[k])
    return [Range(p, 0, n) if n >= 0 else None for p, n in zip(paths, sizes.tolist(), strict=True)]


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
    found = _read_index_bytes(info, path, nbytes)
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


def _read_index_bytes(info: ArrayInfo, path: str, nbytes: int) -> tuple[int, bytes] | None:
    """The shard's size and its ``nbytes`` of index (at its start or end); None if it does not exist."""
    assert info.shard is not None
    at_start = info.shard.index_at_start

    def local() -> tuple[int, bytes]:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            return size, os.pread(f.fileno(), nbytes, 0 if at_start else max(size - nbytes, 0))

    def remote() -> tuple[int, bytes]:
        fs = filesystem(info)
        size = fs.size(path)
        start = 0 if at_start else max(size - nbytes, 0)
        return size, fs.cat_file(path, start=start, end=min(start + nbytes, size))

    try:
        return retrying(path, as_oserror(remote) if info.remote else local)
    except FileNotFoundError:
        return None


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
    while k < len(items):  # one loop over plain tuples: dataset B locates 4096 files a pass
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
