"""Per-process GPU set-up: kvikio's IO thread pool (its default is one thread)."""

import os
import threading

import kvikio.defaults

from .. import config

_lock = threading.Lock()
_done = False


def configure() -> None:
    """Size kvikio's thread pool from ``zarr_dask_gpu.kvikio-threads`` (default: the CPU count), once
    per process."""
    global _done
    with _lock:
        if not _done:
            kvikio.defaults.set("num_threads", config.integer("kvikio-threads") or os.cpu_count() or 1)
            _done = True
