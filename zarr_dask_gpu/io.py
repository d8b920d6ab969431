"""Reading chunk files and byte ranges into one staging buffer: the reader protocol and the host
reader (POSIX preads, or fsspec requests for remote stores); ``gpu/reader.py`` has the kvikio one.

Readers never decode. Each places read unit ``i`` at ``offsets[i]`` of one buffer; every read's first
payload (after ``skip`` header bytes) starts on an ``align``-byte boundary, as nvCOMP requires.
"""

import errno
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import _preads
from .metadata import ArrayInfo
from .retry import as_oserror, retrying
from .storage import Range, Read, coalesce, native_threads


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


def place(lengths: Sequence[int], skip: int, align: int) -> tuple[list[int], int]:
    """Consecutive places for pieces of ``lengths`` bytes, each one's payload (after ``skip``) aligned;
    and the total length."""
    starts, cursor = [], 0
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


class HostReader:
    """Parallel POSIX preads into one numpy buffer; with an fsspec filesystem, its concurrent range
    requests (``cat_ranges``) instead."""

    def __init__(self, fs: Any = None) -> None:
        self.fs = fs

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        if self.fs is not None:
            return self._read_remote(ranges, skip, align)
        plan = layout(ranges, skip, align)
        buf = np.empty(plan.total, dtype=np.uint8)
        pread_all(buf, plan)
        return Staged(buf, plan.offsets, plan.sizes)

    def _read_remote(self, ranges: Sequence[Range | None], skip: int, align: int) -> Staged:
        fs = self.fs
        blobs: list[bytes | None] = [None] * len(ranges)
        whole = [i for i, r in enumerate(ranges) if r is not None and r.size < 0]
        if whole:  # objects of unknown size (unsharded chunks): a missing one is a missing chunk
            paths = [ranges[i].path for i in whole]  # type: ignore[union-attr]
            got = retrying(paths[0], as_oserror(lambda: _raise_failed(fs.cat(paths, on_error="return"))))
            got = {fs._strip_protocol(k): v for k, v in got.items()}  # s3fs drops the protocol, http keeps it
            for i, p in zip(whole, paths, strict=True):
                data = got[fs._strip_protocol(p)]
                blobs[i] = None if isinstance(data, FileNotFoundError) else data
        reads = coalesce([r if r is not None and r.size >= 0 else None for r in ranges])
        if reads:
            where = [rd.path for rd in reads]
            starts, ends = [rd.offset for rd in reads], [rd.offset + rd.size for rd in reads]
            got = retrying(
                where[0],
                as_oserror(lambda: _raise_failed(fs.cat_ranges(where, starts, ends, on_error="return"))),
            )
            for rd, data in zip(reads, got, strict=True):
                if not isinstance(data, FileNotFoundError) and len(data) > rd.size:
                    raise OSError(
                        errno.EIO,
                        f"{rd.path}: the server sent {len(data)} bytes for a {rd.size}-byte range: it "
                        "ignores byte-range (HTTP Range) requests, which shards and partial reads need",
                    )
                if isinstance(data, FileNotFoundError) or len(data) != rd.size:
                    raise OSError(
                        errno.EIO, f"short read of {rd.path}: {len(data)} of {rd.size} bytes at {rd.offset}"
                    )
                for unit, at in rd.members:
                    blobs[unit] = data[at : at + ranges[unit].size]  # type: ignore[union-attr]
        return staged_from(blobs, skip, align)


read_files = _preads.read  # a module attribute, so that fault-injection tests can wrap it


def pread_all(buf: np.ndarray, plan: Layout) -> None:
    """The plan's reads into host memory ``buf``, in one native batch without the GIL (Python's
    open/pread/close per file cost more than dataset B's 80 KB reads: docs/performance.md). A read
    that failed is tried again here under the retry settings; a file that vanished raises."""
    reads = plan.reads
    if not reads:
        return
    errors = np.zeros(len(reads), dtype=np.int32)
    read_files(
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


def host_reader(info: ArrayInfo) -> ChunkReader:
    """The host reader for ``info``'s store (``Store.host_reader``): POSIX preads, or fsspec range
    requests for a URL."""
    return info.store.host_reader()


def _raise_failed(results: Any) -> Any:
    """fsspec's ``on_error="return"`` results, raising the first error other than a missing object."""
    values = results.values() if isinstance(results, dict) else results
    for v in values:
        if isinstance(v, BaseException) and not isinstance(v, FileNotFoundError):
            raise v
    return results


def staged_from(blobs: Sequence[bytes | None], skip: int, align: int) -> Staged:
    """Bytes already in host memory, placed in one staging buffer as a reader would place them."""
    offsets = np.full(len(blobs), -1, dtype=np.int64)
    sizes = np.array([len(b) if b is not None else 0 for b in blobs], dtype=np.int64)
    present = [i for i, b in enumerate(blobs) if b is not None]
    starts, total = place([len(blobs[i]) for i in present], skip, align)  # type: ignore[arg-type]
    buf = np.empty(total, dtype=np.uint8)
    for i, start in zip(present, starts, strict=True):
        offsets[i] = start
        buf[start : start + sizes[i]] = np.frombuffer(blobs[i], dtype=np.uint8)  # type: ignore[arg-type]
    return Staged(buf, offsets, sizes)
