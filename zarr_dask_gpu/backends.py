"""Backends of a read task: where a block's chunks are read, decoded and assembled.

A backend turns the stored chunks a block needs into arrays on its device; ``task.read_region``
assembles them. The GPU backend lives in ``gpu/`` and is imported only when asked for
(``task.get_backend``); both share ``host_decoded``, zarr-python's decode on the host.
"""

import contextlib
import functools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from . import config
from .codecs.cpu import decode_chunk
from .metadata import ArrayInfo
from .plan import BlockRequest, ChunkPiece
from .storage.readers import host_reader
from .storage.units import locate


class Backend(Protocol):
    """Reads and decodes the chunks of blocks into the blocks, in memory where the backend says."""

    @property
    def xp(self) -> Any:
        """The array module of the backend's blocks (numpy or cupy)."""
        ...

    def context(self) -> contextlib.AbstractContextManager[None]:
        """Held while a task decodes and assembles (the GPU backend's CUDA stream)."""
        ...

    def decode_many(self, blocks: Sequence[BlockRequest]) -> list[tuple[Any, list[bool]]]:
        """Make each block with its ``make()`` (the C-order block, of this backend's array module: the
        caller decides what memory it is) and put each stored chunk's part into it, for blocks of one
        array or several at once: a backend may batch their reads and decodes together, and decode a
        chunk straight into the block where it lies whole and contiguous there
        (``plan.direct_offsets``). A backend calls ``make`` once, when it is ready to fill the block:
        the GPU one after the block's chunks are read, so that tasks waiting to read hold no block.

        Returns
        -------
        blocks
            Per block, the block made and, per piece, whether its chunk is stored (False: missing,
            the block untouched there, for the caller's fill value).

        Raises
        ------
        ChunkDecodeError
            A chunk is damaged; the message names its array and key.
        DeviceFaultError
            A CUDA error during the batch's device work; the message names its array and keys.
        """
        ...


class CpuBackend:
    """Parallel preads and zarr-python/numcodecs decode into numpy."""

    xp = np

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        yield

    def _decode(self, info: ArrayInfo, pieces: Sequence[ChunkPiece], out: np.ndarray) -> list[bool]:
        def put(i: int, chunk: np.ndarray) -> None:  # on the pool's threads: copies in parallel
            out[pieces[i].block_sel] = chunk[pieces[i].chunk_sel]

        ranges = locate(info, [p.coords for p in pieces])
        return host_decoded(info, pieces, ranges, put, parallel=True)

    def decode_many(self, blocks: Sequence[BlockRequest]) -> list[tuple[np.ndarray, list[bool]]]:
        done = []
        for info, pieces, make in blocks:  # each block's chunks are already parallel
            out = make()
            done.append((out, self._decode(info, pieces, out)))
        return done


def host_decoded(
    info: ArrayInfo,
    pieces: Sequence[ChunkPiece],
    ranges: Sequence[Any],
    put: Callable[[int, np.ndarray], None],
    parallel: bool,
) -> list[bool]:
    """The pieces' chunks (stored at ``ranges``) read by the host reader and decoded by zarr-python,
    each handed to ``put(i, chunk)``; per piece, whether its chunk is stored. With ``parallel`` the
    chunks decode (and ``put`` runs) on the process's pool of ``cpu-threads``."""
    staged = host_reader(info).read(ranges)
    view = memoryview(staged.buffer)

    def one(i: int) -> bool:
        off, n = staged.offsets[i], staged.sizes[i]
        if off < 0:
            return False
        put(i, decode_chunk(info, pieces[i].coords, view[off : off + n]))
        return True

    if not parallel or len(pieces) < 2:
        return [one(i) for i in range(len(pieces))]
    return list(decode_pool().map(one, range(len(pieces))))


def host_block(
    info: ArrayInfo,
    pieces: Sequence[ChunkPiece],
    shape: tuple[int, ...],
    empty: Callable[[tuple[int, ...], np.dtype], np.ndarray],
) -> tuple[np.ndarray, list[bool]]:
    """A block of ``shape`` made by ``empty`` on the host (pinned memory where it goes on to a device,
    in one copy), its stored chunks decoded by zarr-python on the process's pool of ``cpu-threads``;
    per piece, whether its chunk is stored (the block is left as made where it is not)."""
    block = empty(shape, info.dtype)

    def put(i: int, chunk: np.ndarray) -> None:
        block[pieces[i].block_sel] = chunk[pieces[i].chunk_sel]

    return block, host_decoded(info, pieces, locate(info, [p.coords for p in pieces]), put, parallel=True)


def decode_pool() -> ThreadPoolExecutor:
    """The process's pool of ``cpu-threads`` for the chunks the host decodes (the libraries free the
    GIL), CPU tasks' and the GPU path's alike: tasks running at once share it rather than each
    starting threads of its own on the same cores."""
    return _pool(config.cpu_threads())


@functools.cache
def _pool(threads: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(threads, thread_name_prefix="zarr-dask-gpu-decode")


os.register_at_fork(after_in_child=_pool.cache_clear)  # a forked child has none of the threads
