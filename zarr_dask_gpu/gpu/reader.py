"""kvikio reads of chunk files and shard byte ranges into one device staging buffer."""

import contextlib
import errno
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

import cupy as cp
import cupyx
import kvikio
import numpy as np

from .. import config
from ..io import Staged, layout, pread_all
from ..retry import retrying
from ..storage import Range, Read
from .sync import wait
from .transfer import mapped

# files open at once per task: bounds descriptors when many tasks run in one process
_WINDOW = 64


class KvikioReader:
    """CuFile preads (GPUDirect Storage, or kvikio's POSIX compat mode) into a staging buffer; reads
    smaller than ``host-read-below`` on average are POSIX preads by native threads into pinned
    host memory. ``staging`` says where the buffer the kernels read lives: device memory (pinned host
    reads then go there in one copy), or pinned host memory that kernels read over the bus."""

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        plan = layout(ranges, skip, align)
        on_host = config.choice("staging") == "host"
        small = plan.reads and plan.total < len(plan.reads) * config.nbytes("host-read-below")
        if small or on_host:
            buf = cupyx.empty_pinned(max(plan.total, 1), dtype=np.uint8)
        else:
            buf = cp.empty(max(plan.total, 1), dtype=np.uint8)
        if small:
            pread_all(buf, plan)
        else:
            for w in range(0, len(plan.reads), _WINDOW):
                window = range(w, min(w + _WINDOW, len(plan.reads)))
                retrying(
                    f"{len(window)} reads under {os.path.dirname(plan.reads[w].path)}",
                    functools.partial(self._read_window, plan.reads, plan.starts, window, buf),
                )
        if isinstance(buf, np.ndarray):
            buf = mapped(buf) if on_host else _to_device(buf)
        return Staged(buf, plan.offsets, plan.sizes)

    @staticmethod
    def _read_window(reads: Sequence[Read], starts: Sequence[int], window: range, buf: Any) -> None:
        with in_flight() as (files, futures):
            for k in window:
                rd = reads[k]
                files.append(kvikio.CuFile(rd.path, "r"))
                futures.append(files[-1].pread(buf[starts[k] : starts[k] + rd.size], rd.size, rd.offset))
            collect(futures, [reads[k] for k in window])


def _to_device(host: np.ndarray) -> cp.ndarray:
    """Small reads land in pinned host memory and go to the device in one copy: a CuFile per file
    (an open, a pool task and a future; in compat mode a bounce-buffer copy and sync per read) cost
    more than dataset B's 80 KB reads themselves (docs/performance.md)."""
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
        for f in files:
            f.close()


def collect(futures: list, reads: Sequence[Read]) -> None:
    """Wait for each read's future (got once: it is dropped from ``futures``); a short read raises."""
    for i, rd in enumerate(reads):
        fut, futures[i] = futures[i], None
        got = fut.get()
        if got != rd.size:
            raise OSError(errno.EIO, f"short read of {rd.path}: {got} of {rd.size} bytes at {rd.offset}")
