"""Reading whole chunk files into one staging buffer: a host reader and a kvikio reader.

Readers never decode. Each places chunk ``i`` at ``offsets[i]`` in one buffer so that its payload
(after ``skip`` header bytes) starts on an ``align``-byte boundary, as nvCOMP requires.
"""

import errno
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import config
from .storage import Range, Read, coalesce


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


def layout(ranges: Sequence[Range | None], skip: int, align: int) -> Layout:
    """Merge ``ranges`` into preads and place them, each read's start aligned for its payload."""
    reads = coalesce(ranges)
    offsets = np.full(len(ranges), -1, dtype=np.int64)
    sizes = np.array([r.size if r is not None else 0 for r in ranges], dtype=np.int64)
    starts, cursor = [], 0
    for rd in reads:
        cursor += (-(cursor + skip)) % align
        starts.append(cursor)
        for unit, at in rd.members:
            offsets[unit] = cursor + at
        cursor += rd.size
    return Layout(reads, starts, offsets, sizes, cursor)


def retrying[T](what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``, retrying transient OS errors (``zarr_dask_gpu.io-retries`` times, backing off).

    A file that does not exist is not transient: it is a missing chunk, found by ``locate``.
    """
    retries, delay = int(config.get("io-retries")), float(config.get("io-retry-delay"))
    for attempt in range(retries + 1):
        try:
            return fn()
        except FileNotFoundError:
            raise
        except OSError as e:
            if attempt == retries:
                raise OSError(e.errno, f"reading {what} failed after {retries + 1} attempts: {e}") from e
            time.sleep(delay * 2**attempt)
    raise AssertionError("unreachable")  # the loop returns or raises


def cpu_threads() -> int:
    return config.get("cpu-threads") or os.cpu_count() or 1


class HostReader:
    """Parallel POSIX preads into one numpy buffer."""

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        plan = layout(ranges, skip, align)
        buf = np.empty(plan.total, dtype=np.uint8)

        def one(k: int) -> None:
            rd = plan.reads[k]
            view = memoryview(buf)[plan.starts[k] : plan.starts[k] + rd.size]

            def attempt() -> None:
                with open(rd.path, "rb", buffering=0) as f:
                    f.seek(rd.offset)
                    got = f.readinto(view)
                if got != rd.size:  # the file shrank, or a shard is shorter than its index says
                    raise OSError(
                        errno.EIO, f"short read of {rd.path}: {got} of {rd.size} bytes at {rd.offset}"
                    )

            retrying(rd.path, attempt)

        if len(plan.reads) > 1:
            with ThreadPoolExecutor(min(cpu_threads(), len(plan.reads))) as ex:
                list(ex.map(one, range(len(plan.reads))))
        elif plan.reads:
            one(0)
        return Staged(buf, plan.offsets, plan.sizes)
