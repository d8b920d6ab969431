"""This package's inflate kernel (``kernels/inflate.cu``), with ``deflate-decoder: kernels``: gzip and zlib
chunks decoded on the device, a warp a stream. The kernel accepts a stream only where zlib (and
Python's gzip reader) decode it to exactly the chunk's bytes; the streams it refuses are decoded by
the reference library on the host (``fallback``), whose verdict is final."""

from collections.abc import Callable

import cupy as cp
import numpy as np

from .. import kernels
from ..kernels.shared import INFLATE
from ..runtime import transfer
from . import zstd_blocks

WRAPPERS = {"zlib": INFLATE["IF_ZLIB"], "gzip": INFLATE["IF_GZIP"]}
_WARPS = INFLATE["IF_WARPS"]  # streams a thread block, a warp each


class Decode(zstd_blocks.Decode):
    """One launched batch of streams (``zstd_blocks.Decode``'s report, with the inflate statuses)."""

    reasons = {  # noqa: RUF012  # the kernel's statuses
        INFLATE["IF_BAD"]: "inflate kernel: not Deflate as zlib reads it",
        INFLATE["IF_TRUNCATED"]: "inflate kernel: the stream is cut short",
        INFLATE["IF_OVERFLOW"]: "inflate kernel: decodes to more than the chunk's bytes",
        INFLATE["IF_SHORT"]: "inflate kernel: decodes to fewer than the chunk's bytes",
        INFLATE["IF_CHECK"]: "inflate kernel: checksum or length does not match",
    }


def launch(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
    fallback: Callable[[np.ndarray], list[tuple[int, str]]],
) -> Decode:
    """Inflate stream ``i`` (``src_sizes[i]`` bytes at device address ``src[i]``, a ``compression``
    chunk: "zlib" or "gzip") into exactly ``dst_sizes[i]`` bytes at device address ``dst[i]`` on
    ``stream`` (the current stream); those the kernel refuses go to ``fallback``."""
    n = len(src)
    cols, pinned = transfer.upload([src, src_sizes, dst, dst_sizes], np.uint64)
    status = cp.zeros(n, dtype=np.int32)
    if n:
        kernel = kernels.function("inflate.cu", "inflate_batch")
        args = (
            np.int64(n),
            cols[:n],
            cols[n : 2 * n].view(np.int64),
            cols[2 * n : 3 * n],
            cols[3 * n :].view(np.int64),
            np.int32(WRAPPERS[compression]),
            status,
        )
        kernel(((n + _WARPS - 1) // _WARPS,), (32 * _WARPS,), args)
    return Decode(status, fallback, (cols, pinned), stream)
