"""kvikio reads of chunk files and shard byte ranges into one device staging buffer."""

import contextlib
import errno
import functools
from collections.abc import Generator, Iterator, Sequence
from typing import Any

import cupy as cp
import cupyx
import kvikio
import numpy as np

from ... import config
from ...storage.readers import Staged, layout, pread_all
from ...storage.retry import retrying
from ...storage.units import Range, Read
from ..runtime.sync import wait
from ..runtime.transfer import mapped

# files open at once per task: bounds descriptors when many tasks run in one process
_WINDOW = 64


class KvikioReader:
    """CuFile preads (GPUDirect Storage, or kvikio's POSIX compat mode) into a staging buffer; reads
    smaller than ``host-read-below`` on average are POSIX preads by native threads into pinned
    host memory. ``staging`` says where the buffer the kernels read lives: device memory (pinned host
    reads then go there in one copy), or pinned host memory that kernels read over the bus."""

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        """``ChunkReader.read``."""
        with self.submit(ranges, skip, align) as pending:
            return pending.result()

    def submit(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> "PendingRead":
        """The reads of ``read`` put under way: the first window of them queued on kvikio's pool
        (small reads: none yet), so that the caller's work until ``result()`` (a task's blocks made
        from an emptied pool: docs/decisions/allocation.md) overlaps them."""
        plan = layout(ranges, skip, align)
        on_host = config.choice("staging") == "host"
        small = plan.reads and plan.total < len(plan.reads) * config.nbytes("host-read-below")
        if small or on_host:
            buf = cupyx.empty_pinned(max(plan.total, 1), dtype=np.uint8)
        else:
            buf = cp.empty(max(plan.total, 1), dtype=np.uint8)

        def steps() -> Generator[None, None, None]:  # yields once the reads are under way
            if small:
                yield
                pread_all(buf, plan)
            else:
                yield from _read_all(plan.reads, plan.starts, buf)
            out = buf
            if isinstance(out, np.ndarray):
                out = mapped(out) if on_host else upload(out)
            done.append(Staged(out, plan.offsets, plan.sizes))

        done: list[Staged] = []
        return PendingRead(steps(), done)


class PendingRead:
    """Reads under way into a staging buffer (``KvikioReader.submit``), as kvikio's own futures are:
    ``result()`` finishes them and returns what they staged. Used as a context manager, it lets no
    read outlive it: on leaving, reads still in flight finish and their files close, whatever the
    caller raised."""

    def __init__(self, steps: Generator[None, None, None], done: list[Staged]) -> None:
        self._steps, self._done = steps, done
        next(self._steps)  # the reads put under way

    def result(self) -> Staged:
        """The staged chunks, once every read has landed (a read that failed tried again).

        Raises
        ------
        OSError
            A read failed after its retries; FileNotFoundError where a file vanished.
        """
        if not self._done:
            for _ in self._steps:
                pass
        return self._done[0]

    def __enter__(self) -> "PendingRead":
        return self

    def __exit__(self, *exc: object) -> None:
        self._steps.close()  # reads in flight land, files close (``in_flight``)


def _read_all(reads: Sequence[Read], starts: Sequence[int], buf: Any) -> Generator[None, None, None]:
    """Every read on kvikio's pool, at most ``_WINDOW`` files open: past the first ``_WINDOW`` reads,
    each waits for the oldest in flight, so the pool keeps ``_WINDOW`` queued rather than draining at
    the end of each window. Yields once, when the first window is queued. A read that fails is tried
    again alone under the retry settings."""
    views = [buf[s : s + rd.size] for rd, s in zip(reads, starts, strict=True)]
    with in_flight() as (files, futures):
        for k, rd in enumerate(reads):
            if k == _WINDOW:
                yield
            if k >= _WINDOW:
                _settle(files, futures, reads, views, k - _WINDOW)
            try:
                files.append(_open(rd.path))
            except FileNotFoundError:
                raise
            except OSError as e:
                files.append(None)
                futures.append(None)
                retrying(rd.path, functools.partial(_read_one, rd, views[k]), failed=e)
                continue
            futures.append(files[k].pread(views[k], rd.size, rd.offset))
        if len(reads) <= _WINDOW:
            yield
        for k in range(max(len(reads) - _WINDOW, 0), len(reads)):
            _settle(files, futures, reads, views, k)


def _settle(files: list, futures: list, reads: Sequence[Read], views: Sequence[Any], k: int) -> None:
    """Read ``k`` waited for (its future got once: kvikio's waits for all of a read's pieces, failed
    or not) and its file closed; a failed read then tried again."""
    fut, futures[k] = futures[k], None
    f, files[k] = files[k], None
    if fut is None:  # read alone when its file would not open
        return
    failed = None
    try:
        _check(_got(fut, reads[k].path), reads[k])
    except OSError as e:
        failed = e
    finally:
        f.close()  # before a retry opens the file again: no more than _WINDOW open
    if failed is not None:
        retrying(reads[k].path, functools.partial(_read_one, reads[k], views[k]), failed=failed)


def _read_one(rd: Read, into: Any) -> None:
    f = _open(rd.path)
    try:
        _check(_got(f.pread(into, rd.size, rd.offset), rd.path), rd)
    finally:
        f.close()


def _open(path: str) -> kvikio.CuFile:
    """``path`` opened by kvikio, whose failures are a RuntimeError naming no file: where Python
    cannot open the file either, its OSError (FileNotFoundError, PermissionError, ...) is raised, as
    the host reader's would be; else kvikio's error stays as it is."""
    try:
        return kvikio.CuFile(path, "r")
    except RuntimeError as e:
        try:
            open(path, "rb").close()
        except OSError as why:
            raise why from e
        raise


def _got(fut: Any, path: str) -> int:
    """A pread future's byte count; kvikio's POSIX failures (a RuntimeError: a file ending before its
    range says "EOF") as OSError naming ``path``; its other failures (CUDA's) stay as they are."""
    try:
        return int(fut.get())
    except RuntimeError as e:
        if "POSIX error" not in str(e):
            raise
        raise OSError(errno.EIO, f"short read of {path}: {e}") from e


def _check(got: int, rd: Read) -> None:
    if got != rd.size:
        raise OSError(errno.EIO, f"short read of {rd.path}: {got} of {rd.size} bytes at {rd.offset}")


def upload(host: np.ndarray) -> cp.ndarray:
    """Small reads land in pinned host memory and go to the device in one copy: a CuFile per file
    (an open, a pool task and a future; in compat mode a bounce-buffer copy and sync per read) cost
    more than reads of small chunks, tens of KB each, themselves (docs/decisions/local-reads.md)."""
    buf = cp.empty(host.nbytes, dtype=np.uint8)
    buf.set(host)
    wait(cp.cuda.get_current_stream())  # the pinned buffer goes back to its pool after this
    return buf


@contextlib.contextmanager
def in_flight() -> Iterator[tuple[list, list]]:
    """Lists for open kvikio files and their pread futures; on leaving, reads still in flight (after
    an error) finish before their files close."""
    files: list = []
    futures: list = []
    try:
        yield files, futures
    finally:
        for fut in filter(None, futures):
            with contextlib.suppress(Exception):
                fut.get()
        for f in filter(None, files):
            f.close()


def collect(futures: list, reads: Sequence[Read]) -> None:
    """Wait for each read's future (got once: it is dropped from ``futures``); a short read raises."""
    for i, rd in enumerate(reads):
        fut, futures[i] = futures[i], None
        _check(fut.get(), rd)
