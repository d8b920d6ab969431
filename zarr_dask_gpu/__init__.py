"""zarr-dask-gpu: Zarr arrays into GPU memory with dask, kvikio and batched nvCOMP decode."""

import os

# CUDA maps streams onto this many hardware queues (default 8); streams that share one wait for each
# other's kernels, so with more task threads than queues a task's small kernels wait behind another
# task's long decode (docs/configuration.md). Read when a CUDA context is created.
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

from . import config
from .errors import (
    BlockMemoryError,
    ChunkDecodeError,
    DeviceFaultError,
    DeviceUnavailableError,
    MetadataError,
    MissingChunkError,
    StoreError,
    UnsupportedDtypeError,
    ZarrGpuError,
    ZarrGpuWarning,
)
from .graph import from_zarr_gpu

__version__ = "0.1.0"
__all__ = [
    "BlockMemoryError",
    "ChunkDecodeError",
    "DeviceFaultError",
    "DeviceUnavailableError",
    "MetadataError",
    "MissingChunkError",
    "StoreError",
    "UnsupportedDtypeError",
    "ZarrGpuError",
    "ZarrGpuWarning",
    "__version__",
    "config",
    "from_zarr_gpu",
    "open_dataset",
    "open_datatree",
]


def __getattr__(name: str):
    # xarray is an optional extra: its entry points import only when asked for
    if name in ("open_dataset", "open_datatree"):
        from .extras import require

        require("xarray", f"zarr_dask_gpu.{name}")
        from .xarray import backend

        return getattr(backend, name)
    raise AttributeError(f"module 'zarr_dask_gpu' has no attribute {name!r}")
