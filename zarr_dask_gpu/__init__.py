"""zarr-dask-gpu: Zarr arrays into GPU memory with dask, kvikio and batched nvCOMP decode."""

from . import config
from .errors import (
    BlockMemoryError,
    ChunkDecodeError,
    MetadataError,
    MissingChunkError,
    ZarrGpuError,
    ZarrGpuWarning,
)
from .graph import from_zarr_gpu

__version__ = "0.1.0"
__all__ = [
    "BlockMemoryError",
    "ChunkDecodeError",
    "MetadataError",
    "MissingChunkError",
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
        from . import xarray_backend

        return getattr(xarray_backend, name)
    raise AttributeError(f"module 'zarr_dask_gpu' has no attribute {name!r}")
