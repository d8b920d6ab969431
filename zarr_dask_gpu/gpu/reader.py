"""kvikio reads of whole chunk files into one device staging buffer."""

import errno
import os
import threading
from collections.abc import Sequence

import cupy as cp
import kvikio
import numpy as np

from ..io import Staged, layout, retrying

# files open at once per task: bounds descriptors when many tasks run in one process
_WINDOW = 64
# CuFile handle creation is serialised: concurrent opens with decodes crashed once (docs/design.md)
_open_lock = threading.Lock()


class KvikioReader:
    """CuFile preads (GPUDirect Storage, or kvikio's POSIX compat mode) into device memory."""

    def read(self, paths: Sequence[str], skip: int = 0, align: int = 1) -> Staged:
        offsets, sizes, total = layout(paths, skip, align)
        buf = cp.empty(max(total, 1), dtype=np.uint8)
        todo = np.flatnonzero(offsets >= 0)
        for w in range(0, len(todo), _WINDOW):
            window = todo[w : w + _WINDOW]
            retrying(
                f"{len(window)} chunk files under {os.path.dirname(paths[window[0]])}",
                lambda window=window: self._read_window(paths, window, buf, offsets, sizes),
            )
        return Staged(buf, offsets, sizes)

    @staticmethod
    def _read_window(
        paths: Sequence[str], window: np.ndarray, buf: cp.ndarray, offsets: np.ndarray, sizes: np.ndarray
    ) -> None:
        inflight = []
        try:
            for i in window:
                with _open_lock:
                    f = kvikio.CuFile(paths[i], "r")
                lo, n = int(offsets[i]), int(sizes[i])
                inflight.append((i, f, f.pread(buf[lo : lo + n], n, 0)))
            for i, _, fut in inflight:
                got = fut.get()
                if got != sizes[i]:
                    raise OSError(errno.EIO, f"short read of {paths[i]}: {got} of {sizes[i]} bytes")
        finally:
            for _, f, _ in inflight:
                f.close()
