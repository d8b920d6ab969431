"""Reading chunk files and byte ranges into one staging buffer: the reader protocol and the host
reader (POSIX preads of local files; the store's own requests for its other ranges); ``gpu/readers/local.py``
has the kvikio one.

Readers never decode. Each places read unit ``i`` at ``offsets[i]`` of one buffer; every read's first
payload (after ``skip`` header bytes) starts on an ``align``-byte boundary, as nvCOMP requires.
"""

import errno
import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from .. import _preads
from ..metadata import ArrayInfo
from .retry import retrying
from .units import Range, Read, Source, coalesce, native_threads


@dataclass
class Staged:
    """Read units (chunk files or byte ranges) in one buffer.

    Attributes
    ----------
    buffer
        One byte buffer (numpy on the host, cupy on the device) holding every present unit.
    offsets, sizes
        Where each unit starts in ``buffer`` and its stored size; -1 and 0 for missing units.
    """

    buffer: Any
    offsets: np.ndarray
    sizes: np.ndarray

    @property
    def present(self) -> np.ndarray:
        return self.offsets >= 0


class ChunkReader(Protocol):
    """Reads byte ranges into one staging buffer; the reader decides where that memory lives."""

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        """Read every range (None: a missing unit), merging neighbours of one file into one pread.

        A read's first payload (after ``skip`` header bytes) starts on an ``align``-byte boundary.
        """
        ...


@dataclass
class Layout:
    """The preads for a list of ranges and where everything lands in a staging buffer of ``total`` bytes.

    Attributes
    ----------
    reads, starts
        The merged preads and where each lands.
    offsets, sizes
        Each unit's place in the buffer (-1 when missing) and its stored size.
    """

    reads: list[Read]
    starts: list[int]
    offsets: np.ndarray
    sizes: np.ndarray
    total: int


def place(lengths: Sequence[int], skip: int, align: int, start: int = 0) -> tuple[list[int], int]:
    """Consecutive places from ``start`` for pieces of ``lengths`` bytes, each one's payload (after
    ``skip``) aligned; and the total length."""
    starts, cursor = [], start
    for n in lengths:
        cursor += (-(cursor + skip)) % align
        starts.append(cursor)
        cursor += n
    return starts, cursor


def layout(ranges: Sequence[Range | None], skip: int, align: int) -> Layout:
    """Merge ``ranges`` into preads and place them, each read's start aligned for its payload."""
    reads = coalesce(ranges)
    offsets = np.full(len(ranges), -1, dtype=np.int64)
    sizes = np.array([r.size if r is not None else 0 for r in ranges], dtype=np.int64)
    starts, total = place([rd.size for rd in reads], skip, align)
    for rd, start in zip(reads, starts, strict=True):
        for unit, at in rd.members:
            offsets[unit] = start + at
    return Layout(reads, starts, offsets, sizes, total)


class Fetcher(Protocol):
    """Whoever reads a store's ranges that are not local files (``Store.fetch``)."""

    def fetch(self, ranges: Sequence[Range]) -> list[bytes | np.ndarray | None]:
        """Each range's bytes (or a uint8 view of them); None where a whole object (size -1) does not
        exist."""
        ...


class HostReader:
    """Parallel POSIX preads of local files into one host buffer; the store's other ranges (remote
    objects, keys of a zarr store) fetched by the store and placed after them.

    ``empty`` makes the buffer: numpy's by default, pinned memory where it goes on to a device.
    """

    def __init__(
        self, store: Fetcher | None = None, empty: Callable[[int], np.ndarray] | None = None
    ) -> None:
        self.store = store
        self.empty = empty or _host_empty

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        others = [i for i, r in enumerate(ranges) if r is not None and r.source is not Source.FILE]
        if not others:  # local files alone: the hot path
            plan = layout(ranges, skip, align)
            buf = self.empty(plan.total)
            pread_all(buf, plan)
            return Staged(buf, plan.offsets, plan.sizes)
        assert self.store is not None, "ranges other than files need their store"
        blobs = self.store.fetch([ranges[i] for i in others])  # type: ignore[misc]
        plan = layout([r if r is not None and r.source is Source.FILE else None for r in ranges], skip, align)
        got = [(i, b) for i, b in zip(others, blobs, strict=True) if b is not None]
        starts, total = place([len(b) for _, b in got], skip, align, plan.total)
        buf = self.empty(total)
        pread_all(buf, plan)
        for (i, blob), start in zip(got, starts, strict=True):
            np.copyto(buf[start : start + len(blob)], np.frombuffer(blob, dtype=np.uint8))
            plan.offsets[i], plan.sizes[i] = start, len(blob)
        return Staged(buf, plan.offsets, plan.sizes)


def _host_empty(n: int) -> np.ndarray:
    return np.empty(n, dtype=np.uint8)


def pread_all(buf: np.ndarray, plan: Layout) -> None:
    """The plan's reads into host memory ``buf``, in one native batch without the GIL (Python's
    open/pread/close per file cost more than reads of small chunks: docs/decisions/local-reads.md). A read
    that failed is tried again here under the retry settings; a file that vanished raises."""
    reads = plan.reads
    if not reads:
        return
    errors = np.zeros(len(reads), dtype=np.int32)
    _preads.read(
        buf,
        [rd.path for rd in reads],
        np.array([rd.offset for rd in reads], dtype=np.int64),
        np.array([rd.size for rd in reads], dtype=np.int64),
        np.array(plan.starts, dtype=np.int64),
        errors,
        native_threads(len(reads)),
    )
    view = memoryview(buf).cast("B")
    for k in np.flatnonzero(errors).tolist():
        rd, at, code = reads[k], plan.starts[k], int(errors[k])
        if code == errno.ENOENT:
            raise FileNotFoundError(code, os.strerror(code), rd.path)
        failed = (
            OSError(errno.EIO, f"short read of {rd.path}: the file ends before {rd.offset + rd.size}")
            if code < 0
            else OSError(code, os.strerror(code), rd.path)
        )
        retrying(rd.path, functools.partial(_pread_file, rd, view[at : at + rd.size]), failed=failed)


def _pread_file(rd: Read, view: memoryview) -> None:
    fd = os.open(rd.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        got = 0
        while got < rd.size:  # a pread may return less than asked (signals, reads over 2 GiB)
            n = os.preadv(fd, [view[got:]], rd.offset + got)
            if n == 0:  # the file shrank, or a shard is shorter than its index says
                raise OSError(errno.EIO, f"short read of {rd.path}: {got} of {rd.size} bytes at {rd.offset}")
            got += n
    finally:
        os.close(fd)


def host_reader(info: ArrayInfo, empty: Callable[[int], np.ndarray] | None = None) -> HostReader:
    """The host reader of ``info``'s store into buffers made by ``empty`` (numpy's by default)."""
    return HostReader(info.store, empty)
