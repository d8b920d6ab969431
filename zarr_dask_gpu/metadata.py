"""Open a zarr array's metadata and describe it in a small, picklable form for the tasks."""

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
import zarr.storage
from dask.base import tokenize
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from .codecs.chain import ChainPlan, ShardLayout, classify, shard_layout
from .errors import MetadataError, UnsupportedDtypeError

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
        return self.store.path(self.path)

    @property
    def zarr_format(self) -> int:
        return self.metadata.zarr_format

    @functools.cached_property
    def token(self) -> str:
        """A deterministic name for this array's current metadata (tokenizing it costs about 0.3 ms:
        CPU decodes look their codecs up by it per chunk)."""
        return tokenize(self.location, self.metadata.to_dict())

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


def _safe_component(component: str) -> str:
    parts = component.replace("\\", "/").split("/")
    if component.startswith(("/", "\\")) or ".." in parts:
        raise MetadataError(f"component {component!r} leaves the store root")
    return "/".join(p for p in parts if p not in ("", "."))


def _why_no_array(store: "Store", path: str) -> tuple[bool, str] | None:
    """Where no array opens, what is there instead, for the message: whether ``path`` is a group, and
    its arrays or the root group's; None when there is no group at either."""
    for where in dict.fromkeys([path, ""]):  # the component itself, then the root
        try:
            group = store.open_group(where)
            arrays = sorted(
                f"{where}/{name}" if where else name
                for name, member in group.members(max_depth=None)
                if isinstance(member, zarr.Array)
            )
        except Exception:  # no group there either
            continue
        shown = ", ".join(repr(a) for a in arrays[:20])
        shown += f" and {len(arrays) - 20} more" if len(arrays) > 20 else ""
        if where == path:
            if not arrays:
                return True, "it is a zarr group that holds no arrays"
            return True, f"it is a zarr group: pass component= (--component), one of its arrays: {shown}"
        return False, f"the store's root group holds {'the arrays ' + shown if arrays else 'no arrays'}"
    return None


def open_array_info(
    store: Any, component: str | None = None, storage_options: dict[str, Any] | None = None
) -> ArrayInfo:
    """Open the zarr array at ``store`` (a local path, a URL read through fsspec with
    ``storage_options``, or a ``zarr.Array`` in a local store) and describe it.

    Raises
    ------
    MetadataError
        The metadata is missing, unreadable or invalid, or ``component`` leaves the store.
    """
    from .stores import LocalStore, store_for  # stores imports storage and io, which import this module

    if isinstance(store, zarr.Array):
        if component is not None:
            raise ValueError("component cannot be given with an open zarr.Array")
        if isinstance(store.store, zarr.storage.FsspecStore):  # a URL: read through the same filesystem
            fs = store.store.fs
            # zarr's filesystem is asynchronous, on zarr's loop; ours is a plain one with the same options
            options = {k: v for k, v in fs.storage_options.items() if k not in ("asynchronous", "loop")}
            where, path, arr = store_for(fs.unstrip_protocol(store.store.path), options), store.path, store
        elif isinstance(store.store, zarr.storage.LocalStore):
            where, path, arr = LocalStore(str(store.store.root)), store.path, store
        else:
            raise TypeError(f"arrays in a {type(store.store).__name__} are not supported: pass a path or URL")
    elif isinstance(store, str | os.PathLike):
        if component is not None and not isinstance(component, str):
            raise TypeError(
                f"component must be a str (a path inside the group), not {type(component).__name__}"
            )
        where = store_for(os.fspath(store), storage_options)
        path = _safe_component(component or "")
        try:
            arr = where.open_array(path)
        except Exception as e:  # zarr raises many types; we give one, naming the path
            found = _why_no_array(where, path)
            if found and found[0]:  # a group: what it holds is the whole answer
                raise MetadataError(f"no zarr array at {where.path(path)}: {found[1]}") from e
            hint = f"; {found[1]}" if found else ""
            raise MetadataError(
                f"cannot open a zarr array at {where.path(path)}: {type(e).__name__}: {e}{hint}"
            ) from e
    else:
        raise TypeError(f"store must be a local path or a zarr.Array, not {type(store).__name__}")

    meta = arr.metadata
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biufcmM":
        raise UnsupportedDtypeError(f"{where.path(path)}: dtype {dtype} is neither numeric nor a time", arr)
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
        raise MetadataError(
            f"cannot read the zarr array at {where.path(path)}: {type(e).__name__}: {e}"
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
