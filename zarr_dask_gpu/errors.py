"""Exception and warning types raised by zarr-dask-gpu."""


class ZarrGpuError(Exception):
    """Base class of every error this package raises on bad input."""


class MetadataError(ZarrGpuError, ValueError):
    """A zarr metadata document is unreadable, invalid or unsupported."""


class ChunkDecodeError(ZarrGpuError):
    """A stored chunk is damaged: truncated, empty, garbage, or of the wrong decoded size.

    Parameters
    ----------
    store
        Path of the array in its store.
    key
        The chunk key inside the array, such as ``c/1/2`` or ``1.2``.
    reason
        What is wrong with it.
    """

    def __init__(self, store: str, key: str, reason: str) -> None:
        self.store = store
        self.key = key
        self.reason = reason
        super().__init__(f"chunk {key!r} of {store}: {reason}")

    def __reduce__(self):  # keeps the fields across process boundaries (dask workers)
        return type(self), (self.store, self.key, self.reason)


class MissingChunkError(ChunkDecodeError):
    """A chunk is absent and the read was asked to be strict."""


class BlockMemoryError(ZarrGpuError, MemoryError):
    """A block, with its staging and decode buffers, did not fit in (device) memory.

    The message names the array and the block; smaller ``chunks`` or fewer threads per worker help.
    """


class ZarrGpuWarning(UserWarning):
    """A read works, but slower than it could (for example a codec decoded on the CPU)."""
