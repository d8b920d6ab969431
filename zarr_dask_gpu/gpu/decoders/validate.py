"""A structure check of compressed chunks on the device, before nvCOMP sees them.

nvCOMP 6.0 is not hardened against damaged frames: it hangs on some truncated zstd frames, reads out
of bounds on others, and its lz4 writes past its output on damage (docs/design.md). So nvCOMP gets
only lz4 streams that a warp has walked sequence by sequence (32 candidate starts at a time, about
the cost of nvCOMP's own decode): every literal run and match inside the stream and the output, the
decoded size the metadata's. With ``zstd-decoder: nvcomp`` (trusted data) a thread per zstd chunk
walks its frame and block headers and stated sizes, which does not prove the frame sound.
"""

import cupy as cp
import numpy as np

from ...codecs import compressions
from .. import kernels
from ..runtime import transfer

REASONS = {
    1: "truncated or empty",
    2: "bad header (not a {compression} stream)",
    3: "corrupt {compression} structure",
    4: "header says {claimed} bytes, metadata says {expected}",
}


_LZ4_THREADS = 128  # 32 x LZ4_WARPS of cuda/validate.cu


def _kernel(name: str) -> cp.RawKernel:
    return kernels.function("validate.cu", name)


def check_batch(
    buffer: cp.ndarray, offsets: np.ndarray, sizes: np.ndarray, compression: str, expected: int | np.ndarray
) -> list[tuple[int, str]]:
    """Check a batch of compressed chunks (``expected``: each one's decoded size, or one for all).

    Returns
    -------
    bad
        The chunks that must not be decoded, as (index, reason); empty when all are sound.
    """
    kind = compressions.get(compression).device_check
    assert kind is not None, f"{compression} has no device walk"
    n = len(offsets)
    expected_all = np.broadcast_to(np.asarray(expected, dtype=np.int64), (n,))
    ins, pinned = transfer.upload([offsets, sizes, expected_all], np.int64)  # one copy in, one out
    outs = cp.empty(2 * n, dtype=np.int64)  # each chunk's claimed size, then a word its status
    lz4 = compression.startswith("lz4")  # a warp per stream: see lz4_block_warp in cuda/validate.cu
    threads, items = (_LZ4_THREADS, 32 * n) if lz4 else (128, n)
    _kernel("validate_lz4" if lz4 else "validate")(
        ((items + threads - 1) // threads,),
        (threads,),
        (
            buffer,
            ins[:n],
            ins[n : 2 * n],
            np.int32(kind),
            ins[2 * n :],
            outs[n:].view(np.int32),
            outs[:n],
            np.int32(n),
        ),
    )
    got = transfer.read(outs, cp.cuda.get_current_stream())
    del pinned  # the stream has passed the upload
    claimed_h, status_h = got[:n], got[n:].view(np.int32)[:n]
    return [
        (
            int(i),
            REASONS[int(status_h[i])].format(
                compression=compression,
                claimed=int(claimed_h[i]),
                expected=int(expected_all[i]),
            ),
        )
        for i in np.flatnonzero(status_h)
    ]


def _crc_kernel() -> cp.RawKernel:
    return kernels.function("crc32c.cu", "crc32c_check")


def crc32c_mismatches(buffer: cp.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices of the chunks whose last 4 bytes are not the crc32c of the rest (one CUDA block each)."""
    n = len(offsets)
    ins, pinned = transfer.upload([offsets, sizes], np.int64)
    mismatch = cp.zeros(n, dtype=np.int32)
    _crc_kernel()((n,), (256,), (buffer, ins[:n], ins[n:], mismatch))
    found = np.flatnonzero(transfer.read(mismatch, cp.cuda.get_current_stream()))
    del pinned  # the stream has passed the upload
    return found
