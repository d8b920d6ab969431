"""Per-process GPU set-up: kvikio's IO thread pool and nvCOMP scratch through cupy's pool."""

import os
import threading

import cupy as cp
import kvikio.defaults
from nvidia import nvcomp

from .. import config

_lock = threading.Lock()
_done = False


def _nvcomp_alloc(nbytes: int, stream: object) -> cp.cuda.MemoryPointer:
    # cupy's pool keeps one arena per current stream, and decode runs inside its stream's context
    return cp.cuda.alloc(nbytes)


def configure() -> None:
    """Set kvikio's thread pool (its default is one thread) and nvCOMP's allocator, once."""
    global _done
    with _lock:
        if _done:
            return
        threads = config.get("kvikio-threads") or os.cpu_count() or 1
        kvikio.defaults.set("num_threads", threads)
        nvcomp.set_device_allocator(_nvcomp_alloc)
        _done = True
