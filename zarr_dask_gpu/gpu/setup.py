"""Per-process GPU set-up: kvikio's IO thread pool (its default is one thread), and where nvCOMP
takes its scratch (``zarr_dask_gpu.nvcomp-scratch``).

"cupy" routes nvCOMP's scratch through cupy's memory pool (RMM's, where cupy allocates through RMM),
so that scratch is pooled and counted with the blocks. It made a probe script segfault at exit
(H200, nvCOMP 6.0.0): scratch freed by codecs that outlived CUDA. The backend releases its codecs
at exit before cupy's teardown; tests/test_gpu.py checks a process that reads with it exits cleanly.
"""

import os
import threading

import cupy as cp
import kvikio.defaults
from nvidia import nvcomp

from .. import config

_lock = threading.Lock()
_done = False


def configure() -> None:
    """Size kvikio's thread pool from ``zarr_dask_gpu.kvikio-threads`` (default: the CPU count) and
    choose nvCOMP's scratch allocator, once per process."""
    global _done
    with _lock:
        if not _done:
            kvikio.defaults.set("num_threads", config.get("kvikio-threads") or os.cpu_count() or 1)
            scratch = config.get("nvcomp-scratch")
            if scratch == "cupy":
                nvcomp.set_device_allocator(_from_cupy)
            elif scratch != "nvcomp":
                raise ValueError(f"zarr_dask_gpu.nvcomp-scratch must be 'nvcomp' or 'cupy', not {scratch!r}")
            _done = True


def _from_cupy(nbytes: int, stream: int) -> cp.cuda.MemoryPointer:
    # allocated while the task's stream is current (the codec's), so the pool reuses it in order
    return cp.cuda.alloc(nbytes)
