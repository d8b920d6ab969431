"""A high-priority CUDA stream per thread for the small kernels whose verdict the host waits for
before it launches a decode (structure checks, crc32c, blosc header tables).

On the task's own stream such a kernel queued behind the decodes other threads had launched: with 16
tasks at once each check waited about one whole 32-chunk decode (125 ms), four decodes ran at a time
and dataset A read at 5 GB/s; without the checks it read at 16 GB/s (H200, benchmarks/timeline.py).
The GPU schedules a high-priority stream's blocks before the pending blocks of the others.
"""

import atexit
import contextlib
import threading
from collections.abc import Iterator

import cupy as cp

_lock = threading.Lock()
_streams: dict[int, cp.cuda.Stream] = {}  # per thread; released at exit while CUDA is still up


@atexit.register
def _release() -> None:
    with _lock:
        _streams.clear()


def _stream() -> cp.cuda.Stream:
    tid = threading.get_ident()
    with _lock:
        if tid not in _streams:
            # CUDA clamps a priority beyond the device's range to its highest (cupy has no range query)
            _streams[tid] = cp.cuda.Stream(non_blocking=True, priority=-(1 << 10))
        return _streams[tid]


@contextlib.contextmanager
def inspecting() -> Iterator[None]:
    """Run the enclosed kernels on this thread's high-priority stream, ordered after the work already
    queued on the current stream (which may have written what they read)."""
    current, stream = cp.cuda.get_current_stream(), _stream()
    stream.wait_event(current.record())
    with stream:
        yield
