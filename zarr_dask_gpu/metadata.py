"""A zarr array described in a small, picklable form for the tasks (``ArrayInfo``); it opens nothing:
``resolve.open_array_info`` makes one."""

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from dask.base import tokenize
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from .codecs.chain import ChainPlan, ShardLayout

if TYPE_CHECKING:
    from .storage.stores import Store


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
