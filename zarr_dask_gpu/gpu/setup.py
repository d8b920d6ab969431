"""Per-process GPU set-up: kvikio's IO thread pool (its default is one thread), and nvCOMP scratch
from cupy's pool (stream-ordered arenas) rather than cudaMalloc/cudaFree, which synchronise the device."""

import os
import threading

import cupy as cp
import kvikio.defaults
from nvidia import nvcomp

from .. import config

_lock = threading.Lock()
_done = False


def _nvcomp_alloc(nbytes: int, stream: object) -> cp.cuda.MemoryPointer:
    # decode runs inside its stream's context, so cupy hands out memory of that stream's arena
    return cp.cuda.alloc(nbytes)


def configure() -> None:
    """Size kvikio's thread pool (``zarr_dask_gpu.kvikio-threads``, default: the CPU count) and route
    nvCOMP's scratch through cupy's pool, once per process."""
    global _done
    with _lock:
        if not _done:
            kvikio.defaults.set("num_threads", config.get("kvikio-threads") or os.cpu_count() or 1)
            nvcomp.set_device_allocator(_nvcomp_alloc)
            _done = True
