"""Open a zarr array's metadata and describe it in a small, picklable form for the tasks."""

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from dask.base import tokenize
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from .codecs.chain import ChainPlan, ShardLayout, classify, shard_layout
from .errors import StoreError, UnsupportedDtypeError, UnsupportedLayoutError

if TYPE_CHECKING:
    from .stores import Store


@dataclass(frozen=True, eq=False)
class ArrayInfo:
    """What a read task needs to know of one zarr array; building it reads no chunk data.

    Attributes
    ----------
    store
        Where the array's bytes are (``stores.LocalStore``, ``stores.FsspecStore``): chunk paths, shard
        index reads and the readers of chunk ranges are the store's.
    path
        The array's path inside the store ("" for a store that is itself the array).
    shape, chunks
        Array shape and the shape of the unit a task reads and decodes: the stored chunk, the inner
        chunk of a sharded array whose index this package reads, or else the whole shard.
    dtype
        The native-byte-order dtype blocks are returned in.
    fill_value
        Value of absent chunks.
    metadata
        zarr-python's parsed metadata, for chunk keys and CPU decoding.
    chain
        The codec chain of one read unit and what the GPU decodes of it.
    shard
        The sharding layout when read units are inner chunks of shards, else None.
    """

    store: "Store"
    path: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: np.dtype
    fill_value: Any
    metadata: ArrayV2Metadata | ArrayV3Metadata
    chain: ChainPlan
    shard: ShardLayout | None = None

    @functools.cached_property
    def location(self) -> str:
        """The array's folder, as error messages name it."""
        return self.store.location(self.path)

    @property
    def zarr_format(self) -> int:
        return self.metadata.zarr_format

    @functools.cached_property
    def token(self) -> str:
        """A deterministic name for this array in its store (dask's names are made of it): the
        store's identity, the array's path and its current metadata."""
        return tokenize(self.store.identity, self.path, self.metadata.to_dict())

    @functools.cached_property
    def chain_token(self) -> str:
        """A name for how a read unit decodes, whatever store it is in (tokenizing is costly, and
        CPU decodes look their codecs up by it per chunk)."""
        return tokenize(self.metadata.to_dict(), self.chunks, self.shard)

    @property
    def grid(self) -> tuple[int, ...]:
        """The stored grid: the shard shape when sharded, else the chunk shape (blocks align to it)."""
        return self.shard.shape if self.shard is not None else self.chunks

    @functools.cached_property
    def per_shard(self) -> tuple[int, ...]:
        """Read units along each axis of one shard (all ones when unsharded)."""
        if self.shard is None:
            return (1,) * len(self.shape)
        return tuple(s // c for s, c in zip(self.shard.shape, self.chunks, strict=True))

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        """The stored key holding read unit ``coords`` (its shard's key when sharded), such as
        ``c/1/2`` or ``1.2``."""
        if self.shard is None:
            return self.metadata.encode_chunk_key(coords)
        return self.metadata.encode_chunk_key(
            tuple(c // n for c, n in zip(coords, self.per_shard, strict=True))
        )

    def chunk_label(self, coords: tuple[int, ...]) -> str:
        """How errors name a read unit inside its key: the inner chunk of a shard, or nothing."""
        if self.shard is None:
            return ""
        return f"inner chunk {tuple(c % n for c, n in zip(coords, self.per_shard, strict=True))}: "

    def chunk_path(self, coords: tuple[int, ...]) -> str:
        """The file (or URL) holding read unit ``coords``."""
        key = self.chunk_key(coords)
        return self.store.path(f"{self.path}/{key}" if self.path else key)


def open_array_info(
    store: Any, component: str | None = None, storage_options: dict[str, Any] | None = None
) -> ArrayInfo:
    """Open the zarr array at ``store`` and describe it: anything zarr-python opens (a path, a
    ``pathlib``/``UPath`` object, an fsspec URL with ``storage_options``, a zarr ``Store``, a
    ``zarr.Group`` with ``component``, a ``zarr.Array``), opened by zarr-python (``resolve``).

    Raises
    ------
    MetadataError
        The metadata is missing, unreadable or invalid, or ``component`` leaves the store.
    StoreError
        zarr-python does not take ``store``, or the package cannot find the array's metadata where
        it would read its chunks.
    """
    from .resolve import byte_store, open_node  # resolve imports stores and storage, which import this module

    arr = open_node(store, component, storage_options)
    where, path = byte_store(arr), arr.path
    _check_addressed(where, path, arr)
    meta = arr.metadata
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biufcmM":
        raise UnsupportedDtypeError(
            f"{where.location(path)}: dtype {dtype} is neither numeric nor a time", arr
        )
    fill = arr.fill_value if arr.fill_value is not None else 0
    # datetime64 and timedelta64 keep a numpy scalar (NaT has no Python value)
    fill_value = (
        np.asarray(fill, dtype=dtype)[()] if dtype.kind in "mM" else np.asarray(fill, dtype=dtype).item()
    )
    try:  # metadata zarr opens but these readers cannot take (a codec list, a chunk grid)
        layout = shard_layout(meta) if isinstance(meta, ArrayV3Metadata) else None
        chunks = tuple(arr.chunks) if arr.shards is None or layout is not None else tuple(arr.shards)
        chain = classify(meta)
    except Exception as e:  # zarr and the layout raise many types; we give one, naming the path
        raise UnsupportedLayoutError(
            f"cannot read the zarr array at {where.location(path)}: {type(e).__name__}: {e}", arr
        ) from e
    return ArrayInfo(
        store=where,
        path=path,
        shape=tuple(arr.shape),
        chunks=chunks,
        dtype=dtype.newbyteorder("="),
        fill_value=fill_value,
        metadata=meta,
        chain=chain,
        shard=layout,
    )


def _check_addressed(where: "Store", path: str, arr: zarr.Array) -> None:
    """Where this package finds a store's objects itself (local files, remote objects by URL), the
    array's metadata document is where it would look: a chunk it cannot find is then absent, never
    misaddressed. One stat, or one request, when the array is opened."""
    from .stores import FsspecStore, LocalStore

    name = "zarr.json" if arr.metadata.zarr_format == 3 else ".zarray"
    doc = where.path(f"{path}/{name}" if path else name)
    if isinstance(where, LocalStore):
        found = os.path.isfile(doc)
    elif isinstance(where, FsspecStore):
        found = where.size(doc) is not None
    else:  # the store itself answers for every key
        return
    if not found:
        raise StoreError(
            where.root,
            name,
            f"zarr-python opened the array {path!r}, but its metadata is not at {doc}, where this "
            "package would read its chunks",
        )
