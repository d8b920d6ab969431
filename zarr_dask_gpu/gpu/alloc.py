"""Large device buffers made one at a time. A pass from an empty pool makes tens of allocations of
a GiB or so (blocks, staging, scratch) on many task threads at once, and concurrent cudaMallocs of
that size take several times as long as the same made in turn (docs/performance.md). A pool's hit
is as quick under the lock as without it."""

import threading
from collections.abc import Callable

import cupy as cp
import numpy as np

LARGE = 32 << 20  # bytes: smaller buffers, many and quick to make, skip the lock
_lock = threading.Lock()


def empty(nbytes: int) -> cp.ndarray:
    """``nbytes`` (at least one) of uint8 device memory from the current allocator, made under the
    lock when large."""
    nbytes = max(int(nbytes), 1)
    if nbytes < LARGE:
        return cp.empty(nbytes, dtype=np.uint8)
    with _lock:
        return cp.empty(nbytes, dtype=np.uint8)


def made[T](make: Callable[[], T]) -> T:
    """``make()`` under the lock: a block, whose memory the caller's ``make`` chooses."""
    with _lock:
        return make()
