"""Byte ranges of one device buffer copied into another, all in one kernel launch; host columns
uploaded in one copy."""

import cupy as cp
import numpy as np

from .. import kernels

_THREADS = 256


def _kernel() -> cp.RawKernel:
    return kernels.function("copy.cu", "copy_ranges")


def copy_ranges(
    buffer: cp.ndarray, src: np.ndarray, dst: np.ndarray, sizes: np.ndarray, out: cp.ndarray
) -> None:
    """``out[dst[k]:dst[k] + sizes[k]] = buffer[src[k]:src[k] + sizes[k]]`` for every k, on the current
    stream: one launch, where a slice assignment per range cost a launch and Python work each
    (thousands per task for blosc's inner streams)."""
    if len(src):
        n = len(src)
        cols = to_device([src, dst, sizes], np.int64)
        _kernel()((n,), (_THREADS,), (buffer, cols[:n], cols[n : 2 * n], cols[2 * n :], out))


def to_device(columns: list[np.ndarray], dtype: type) -> cp.ndarray:
    """``columns`` end to end in one device array of ``dtype``, in one DMA copy on the current stream
    that the host does not wait for (cupy stages it through pinned memory); each column converted on
    its own (int64 beside uint64 would concatenate through float64). ``transfer.upload`` copies by a
    kernel instead, for uploads the host waits on."""
    return cp.asarray(np.concatenate([np.asarray(a, dtype=dtype) for a in columns]))


def aligned(
    buffer: cp.ndarray, offsets: np.ndarray, sizes: np.ndarray, align: int
) -> tuple[cp.ndarray, np.ndarray]:
    """``buffer`` and ``offsets`` with every range starting on an ``align`` boundary: as they are when
    they already do (whole chunk files), else gathered into a new buffer (ranges inside shards)."""
    if not (offsets % align).any():
        return buffer, offsets
    sizes = np.asarray(sizes, dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(-(-sizes // align) * align)[:-1]]).astype(np.int64)
    out = cp.empty(max(int(starts[-1] + sizes[-1]) if len(sizes) else 0, 1), dtype=np.uint8)
    copy_ranges(buffer, offsets, starts, sizes, out)
    return out, starts
