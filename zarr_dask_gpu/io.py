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


@dataclass
class Staged:
    """Chunk files read into one buffer.

    Attributes
    ----------
    buffer
        One byte buffer (numpy on the host, cupy on the device) holding every present chunk.
    offsets, sizes
        Where each chunk starts in ``buffer`` and its stored size; -1 and 0 for missing chunks.
    """

    buffer: Any
    offsets: np.ndarray
    sizes: np.ndarray

    @property
    def present(self) -> np.ndarray:
        return self.offsets >= 0


class ChunkReader(Protocol):
    """Reads chunk files into one staging buffer; the caller's reader decides where memory lives."""

    def read(self, paths: Sequence[str], skip: int = 0, align: int = 1) -> Staged:
        """Read every file in ``paths``; a file that does not exist is a missing chunk."""
        ...


def layout(paths: Sequence[str], skip: int, align: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Sizes of the files (-1 offset for absent ones) and their placement in a staging buffer."""
    n = len(paths)
    offsets = np.full(n, -1, dtype=np.int64)
    sizes = np.zeros(n, dtype=np.int64)
    cursor = 0
    for i, p in enumerate(paths):
        try:
            size = os.stat(p).st_size
        except FileNotFoundError:
            continue
        cursor += (-(cursor + skip)) % align
        offsets[i], sizes[i] = cursor, size
        cursor += size
    return offsets, sizes, cursor


def retrying[T](what: str, fn: Callable[[], T]) -> T:
    """Run ``fn``, retrying transient OS errors (``zarr_dask_gpu.io-retries`` times, backing off).

    A file that does not exist is not transient: it is a missing chunk, found by ``layout``.
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

    def read(self, paths: Sequence[str], skip: int = 0, align: int = 1) -> Staged:
        offsets, sizes, total = layout(paths, skip, align)
        buf = np.empty(total, dtype=np.uint8)

        def one(i: int) -> None:
            view = memoryview(buf)[offsets[i] : offsets[i] + sizes[i]]

            def attempt() -> None:
                with open(paths[i], "rb", buffering=0) as f:
                    got = f.readinto(view)
                if got != sizes[i]:  # the file shrank between stat and read
                    raise OSError(errno.EIO, f"short read of {paths[i]}: {got} of {sizes[i]} bytes")

            retrying(paths[i], attempt)

        todo = np.flatnonzero(offsets >= 0)
        if len(todo) > 1:
            with ThreadPoolExecutor(min(cpu_threads(), len(todo))) as ex:
                list(ex.map(one, todo))
        else:
            for i in todo:
                one(i)
        return Staged(buf, offsets, sizes)
