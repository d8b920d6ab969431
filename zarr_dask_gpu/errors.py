"""Exception and warning types raised by zarr-dask-gpu."""


class ZarrGpuError(Exception):
    """Base class of every error this package raises on bad input."""


class MetadataError(ZarrGpuError, ValueError):
    """A zarr metadata document is unreadable, invalid or unsupported."""


class UnsupportedDtypeError(MetadataError):
    """An array of strings, bytes or objects: zarr-python reads it on the CPU, nothing on the GPU.

    ``array`` is the open ``zarr.Array``.
    """

    def __init__(self, message: str, array: object = None) -> None:
        super().__init__(message)
        self.array = array


class UnsupportedLayoutError(MetadataError):
    """An array zarr-python reads whose layout these readers cannot take (a rectilinear chunk grid,
    sharding without index codecs): ``xr.open_dataset(engine="zarr_gpu")`` reads such a variable with
    zarr-python on the host, as ``engine="zarr"`` does.

    ``array`` is the open ``zarr.Array``.
    """

    def __init__(self, message: str, array: object = None) -> None:
        super().__init__(message)
        self.array = array


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


class StoreError(ZarrGpuError):
    """A store, or a key in it, cannot be read as asked.

    Parameters
    ----------
    store
        The store as messages name it: its type and where it is.
    key
        The key that failed ("" when the store itself is refused).
    reason
        What is wrong, and what to do.
    """

    def __init__(self, store: str, key: str, reason: str) -> None:
        self.store = store
        self.key = key
        self.reason = reason
        super().__init__(f"{store}: key {key!r}: {reason}" if key else f"{store}: {reason}")

    def __reduce__(self):  # keeps the fields across process boundaries (dask workers)
        return type(self), (self.store, self.key, self.reason)


class DeviceFaultError(ZarrGpuError):
    """A CUDA error during a task's device work: reading or decoding a batch of chunks.

    A ``sticky`` error (an illegal address, a launch failure, an uncorrectable ECC error, ...) leaves the
    process's CUDA context unusable: the worker that saw it is restarted by this package's worker plugin,
    and the task whose batch faulted ends with this error rather than being retried on another worker
    (docs/design.md, "Containment of CUDA faults").

    Parameters
    ----------
    store
        Path of the array in its store (the batch's arrays, comma-separated, when it read several).
    keys
        The chunk keys of the batch that was being read or decoded (``path/key`` when of several arrays).
    reason
        The CUDA error's text, such as ``cudaErrorIllegalAddress: an illegal memory access was
        encountered``.
    sticky
        The process's CUDA context is unusable afterwards.
    """

    NAMED = 3  # keys the message names; the rest are counted

    def __init__(self, store: str, keys: tuple[str, ...], reason: str, sticky: bool) -> None:
        self.store = store
        self.keys = tuple(keys)
        self.reason = reason
        self.sticky = bool(sticky)
        named = ", ".join(map(repr, self.keys[: self.NAMED])) or "no chunks"
        more = f" and {len(self.keys) - self.NAMED} more" if len(self.keys) > self.NAMED else ""
        lost = "; the CUDA context of the process is lost (sticky error)" if self.sticky else ""
        super().__init__(f"CUDA error reading chunks {named}{more} of {store}: {reason}{lost}")

    def __reduce__(self):  # keeps the fields across process boundaries (dask workers)
        return type(self), (self.store, self.keys, self.reason, self.sticky)


class BlockMemoryError(ZarrGpuError, MemoryError):
    """A block, with its staging and decode buffers, did not fit in (device) memory.

    The message names the array and the block; smaller ``chunks`` or fewer threads per worker help.
    """


class DeviceUnavailableError(ZarrGpuError, RuntimeError):
    """``device="gpu"`` was asked for where no usable GPU is: the message names what is missing."""


class ZarrGpuWarning(UserWarning):
    """A read works, but slower than it could (for example a codec decoded on the CPU)."""
