"""Small host-device transfers done by kernels through mapped pinned memory, not by the copy engines.

A task's small copies (a batch's chunk tables, blosc block tables, kernel statuses) may otherwise
wait in the copy engines' queues behind the other tasks' reads, which kvikio's compat mode copies
from its bounce buffers to the device back to back (docs/decisions/device-waits.md has both timed).
"""

from collections.abc import Sequence

import cupy as cp
import cupyx
import numpy as np

from .sync import wait

# an explicit kernel: cupy's `a[...] = b` of like contiguous arrays is a cudaMemcpyAsync (a DMA copy)
_bus_copy = cp.ElementwiseKernel("T x", "T y", "y = x", "zdg_bus_copy")


def mapped(host: np.ndarray) -> cp.ndarray:
    """A cupy array over pinned host memory: with unified addressing a pinned allocation's address is
    valid on the device, so kernels read it over the bus, and no device copy is made. The array holds
    ``host``; the caller keeps it until the kernels reading it are done (cupy's pinned pool is not
    stream-ordered)."""
    mem = cp.cuda.UnownedMemory(host.ctypes.data, host.nbytes, host, cp.cuda.Device().id)
    return cp.ndarray((host.nbytes,), np.uint8, cp.cuda.MemoryPointer(mem, 0))


def upload(columns: Sequence[np.ndarray], dtype: type) -> tuple[cp.ndarray, np.ndarray]:
    """``columns`` end to end in a new device array of ``dtype`` (each column converted on its own: int64
    beside uint64 would concatenate through float64), copied by a kernel on the current stream; and
    the pinned buffer it reads, which the caller keeps until the stream has passed the copy."""
    total = sum(len(c) for c in columns)
    host = cupyx.empty_pinned(max(total, 1), dtype=dtype)[:total]
    np.concatenate([np.asarray(c, dtype=dtype) for c in columns], out=host)
    out = cp.empty(total, dtype=dtype)
    if total:
        _bus_copy(mapped(host).view(dtype), out)
    return out, host


def read(x: cp.ndarray, stream: cp.cuda.Stream) -> np.ndarray:
    """``x`` on the host, copied by a kernel on ``stream`` once the stream has passed what writes it;
    the thread waits for the stream."""
    host = cupyx.empty_pinned(max(x.size, 1), dtype=x.dtype)[: x.size].reshape(x.shape)
    if x.size:
        with stream:
            _bus_copy(x, mapped(host).view(x.dtype).reshape(x.shape))
    wait(stream)
    return host
