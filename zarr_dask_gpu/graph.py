"""Building the dask array: one task per block, lazy, reading no chunk data."""

import dataclasses
import math
import warnings
from typing import Any

import dask.array as da
import numpy as np
from dask.base import tokenize

from . import config
from .device import Device, resolve_device
from .errors import UnsupportedDtypeError, ZarrGpuWarning
from .metadata import ArrayInfo
from .plan import block_chunks
from .resolve import open_array_info, refuse_stranded
from .task import read_region, region_of, select

_warned: set[str] = set()


class ZarrRegionReader:
    """An array-like over a zarr array whose ``__getitem__`` reads a box with this package's tasks.

    dask's ``from_array`` slices it once per block and fuses later slicing into those calls, so a
    task reads only the stored chunks its selection overlaps. (``fancy=True`` is what lets dask
    fuse: with ``getter_nofancy`` its slice fusion stops.)
    """

    def __init__(self, info: ArrayInfo, device: Device, strict: bool) -> None:
        self.info, self.device, self.strict = info, device, strict
        self.shape, self.dtype, self.ndim = info.shape, info.dtype, len(info.shape)

    def __getitem__(self, index: Any) -> Any:
        start, stop, post = region_of(index, self.shape)
        return select(read_region(self.info, start, stop, self.device, self.strict), post)


_GPU_MIN_BLOCK = 32 << 20  # smaller blocks put too few chunks in one nvCOMP batch


def default_block_size(info: ArrayInfo, device: Device) -> int:
    """``zarr_dask_gpu.block-size``; on the CPU, small enough that every core gets several blocks;
    on the GPU, small enough for ``gpu-min-blocks`` blocks (overlapping tasks), down to 32 MiB."""
    size = config.block_size(device)
    nbytes = math.prod(info.shape) * info.dtype.itemsize  # Python ints: no wrap for huge shapes
    if device == "cpu":
        size = min(size, max(nbytes // (4 * config.cpu_threads()), 1))
    else:
        size = min(size, max(nbytes // max(config.integer("gpu-min-blocks"), 1), _GPU_MIN_BLOCK))
    return size


def _meta(device: Device, ndim: int, dtype: np.dtype) -> Any:
    if device == "gpu":
        import cupy

        return cupy.empty((0,) * ndim, dtype=dtype)
    return np.empty((0,) * ndim, dtype=dtype)


def from_zarr_gpu(
    store: Any,
    component: str | None = None,
    *,
    chunks: Any = None,
    device: str = "auto",
    strict: bool | None = None,
    name: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> da.Array:
    """A lazy dask array over a zarr v2 or v3 array, whose blocks are read on the GPU.

    Parameters
    ----------
    store
        Anything ``zarr.open_array`` opens: a path (``str``, ``pathlib``, ``UPath``), an fsspec URL
        (``s3://``, ``https://``, ``file://``, ``memory://``, ``reference://``, chained URLs such as
        ``zip::`` or ``simplecache::``) with ``storage_options``, a zarr ``Store`` object (a
        ``LocalStore``, ``FsspecStore``, ``ObjectStore`` over obstore, ``ZipStore``, ``MemoryStore``,
        an Icechunk session's store, ...), a ``zarr.Group`` (with ``component``) or a ``zarr.Array``.
        docs/stores.md says how each kind of store is read.
    component
        The array's path inside a group, as in ``dask.array.from_zarr``.
    chunks
        Dask's forms (int, tuple, dict, "auto") or a byte size such as "512MiB". Default: blocks of
        about ``zarr_dask_gpu.block-size`` (unset: 1 GiB on the GPU, 256 MiB on the CPU) made of whole
        stored chunks (or shards); on the GPU at least ``gpu-min-blocks`` (4) of them down to 32 MiB,
        on the CPU no larger than needed to give every core four blocks.
    device
        "gpu" (cupy blocks), "cpu" (numpy blocks) or "auto" (gpu when usable).
    strict
        Raise ``MissingChunkError`` for absent chunks instead of reading the fill value.
        Default: ``zarr_dask_gpu.strict``.
    name
        The dask key prefix; default: a deterministic token of the array and its blocks.
    storage_options
        For a URL: fsspec's options (credentials, ``endpoint_url`` for S3-compatible stores, ``fo``
        for ``reference://``, ...); the AWS environment variables apply as usual. Metadata is read
        once, here.

    Returns
    -------
    dask.array.Array
        Cupy blocks with cupy ``meta`` on the GPU, numpy otherwise. Building it reads only metadata.

    Raises
    ------
    MetadataError
        The metadata is missing or invalid, or ``component`` leaves the store.
    StoreError
        The store cannot be read as asked: zarr-python does not take it, or its data lives in this
        process's memory (a ``MemoryStore``) while the current dask cluster's workers run in other
        processes; the message names the store and what to use.
    TypeError
        An argument of the wrong type (``component=3``, ``strict="yes"``).
    DeviceUnavailableError
        ``device="gpu"`` where the GPU path cannot run; the message says what is missing.
    ImportError
        A URL whose filesystem is not installed; the message names the extra that installs it.
    """
    if strict is not None and not isinstance(strict, bool):
        raise TypeError(f"strict must be True, False or None, not {strict!r}")
    dev = resolve_device(device)
    try:
        info = open_array_info(store, component, storage_options)
    except UnsupportedDtypeError as e:  # strings, bytes, objects: zarr-python's, on the host
        if dev == "gpu":
            raise UnsupportedDtypeError(f"{e}: it has no GPU form; read it with device='cpu'", e.array) from e
        # blocks of whole stored chunks by default: dask cannot size variable-length items
        return da.from_zarr(e.array, chunks=chunks or e.array.chunks, name=name or False)  # type: ignore[attr-defined]
    refuse_stranded(info.store)
    if dev == "gpu" and info.dtype.kind in "mM":  # cupy has no datetime64: the int64 bits, as .view("i8")
        bits = np.asarray(info.fill_value).view(np.int64)[()]
        info = dataclasses.replace(info, dtype=np.dtype(np.int64), fill_value=int(bits))
    strict = config.flag("strict") if strict is None else strict
    blocks = block_chunks(
        chunks, info.shape, info.grid, info.dtype, default_block_size(info, dev), info.location
    )
    if dev == "gpu" and info.chain.gpu is None and info.location not in _warned:
        _warned.add(info.location)
        warnings.warn(
            f"{info.location}: {info.chain.cpu_reason}; its chunks decode on the CPU and are copied "
            "to the GPU",
            ZarrGpuWarning,
            stacklevel=2,
        )
    name = name or f"from-zarr-gpu-{tokenize(info.token, blocks, str(dev), strict)}"  # the names as ever
    return da.from_array(
        ZarrRegionReader(info, dev, strict),
        chunks=blocks,
        name=name,
        asarray=False,
        lock=False,
        meta=_meta(dev, len(info.shape), info.dtype),
    )
