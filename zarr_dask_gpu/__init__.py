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
]
