"""Per-process GPU set-up: kvikio's IO thread pool (its default is one thread), and threads that
sleep while they wait for a device."""

import ctypes
import os
import threading
import warnings

import kvikio.defaults

from ... import config

_lock = threading.Lock()
_done = False
# CU_CTX_SCHED_MASK, CU_CTX_SCHED_BLOCKING_SYNC (CUDA's default, AUTO, spins while the process has no
# more contexts than cores)
_SCHED_MASK, _SCHED_BLOCKING_SYNC = 0x07, 0x04


def configure() -> None:
    """Size kvikio's thread pool from ``zarr_dask_gpu.kvikio-threads`` (default: the CPU count) and,
    with ``blocking-sync``, make every device's waits sleep; once per process."""
    global _done
    with _lock:
        if not _done:
            kvikio.defaults.set("num_threads", config.integer("kvikio-threads") or os.cpu_count() or 1)
            if config.flag("blocking-sync"):
                blocking_sync()
            _done = True


def blocking_sync() -> None:
    """Every device's primary context schedules its host waits as blocking syncs: a thread waiting for
    a stream sleeps instead of spinning on a core. kvikio's compat-mode reads wait for a copy after
    each bounce buffer; spinning, its threads take the cores that the tasks' threads need for their
    launches and read-backs (docs/decisions/device-waits.md measures both). The driver applies the flag
    to a context already made as well; the context's other flags are kept."""
    cuda = ctypes.CDLL("libcuda.so.1")
    count = ctypes.c_int()
    if err := cuda.cuInit(0) or cuda.cuDeviceGetCount(ctypes.byref(count)):
        warnings.warn(f"CUDA waits left as they are: CUresult {err}", stacklevel=2)
        return
    for ordinal in range(count.value):
        dev, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        err = cuda.cuDeviceGet(ctypes.byref(dev), ordinal) or cuda.cuDevicePrimaryCtxGetState(
            dev, ctypes.byref(flags), ctypes.byref(active)
        )
        new = (flags.value & ~_SCHED_MASK) | _SCHED_BLOCKING_SYNC
        if err or (err := cuda.cuDevicePrimaryCtxSetFlags_v2(dev, ctypes.c_uint(new))):
            warnings.warn(f"device {ordinal}'s waits left as they are: CUresult {err}", stacklevel=2)
