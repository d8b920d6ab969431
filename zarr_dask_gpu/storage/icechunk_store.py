"""Icechunk repositories: where each chunk of an array lies, as its read-only session's chunk
iterator (``IcechunkStore.array_chunk_iterator``) gives it.

Native chunks of a repository on a local filesystem are files under its ``chunks/`` folder, read
directly (preads, kvikio on the GPU); virtual chunks in local files (``file://``) likewise, once
Icechunk itself has read a byte of each file (so its authorization of virtual chunk containers, and
its check of the file's modification stamp, decide as they do for its own reads). Inline chunks,
native chunks elsewhere and virtual chunks in remote files are read through the store's ``get``. A
chunk the iterator does not list is absent: Icechunk's answer, never a file that is not found.

The session does not say where its repository lies; its pickled state does (it must, to read in
another process). ``_chunks_folder`` reads it from there and checks the folder; where it cannot,
native chunks go through ``get``, slower but the same bytes.
"""

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import numpy as np
import zarr
from zarr.abc.store import RangeByteRequest
from zarr.core.sync import sync

from ..errors import StoreError
from .stores import KeyStore, LocatedStore, Store
from .units import Range, Source

_NATIVE, _VIRTUAL = 1, 2  # icechunk.ChunkType's values (inline is 3)
_LOCAL_PROVIDER = "local_file_system_object_store_provider"
_MEMORY_PROVIDER = "in_memory_object_store_provider"
_CACHED = 16  # manifests kept per process (arrays read at once)


def _providers(store: Any) -> list[dict[str, Any]] | None:
    """The object-store backends named in the store's pickled state; None where there is no such
    state (a writable session) or it is not one this reader knows."""
    try:
        import msgpack

        doc = msgpack.unpackb(store.__getstate__()["_store"], raw=False, strict_map_key=False)
    except Exception:
        return None
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            backend = node.get("backend")
            if node.get("type") == "ObjectStorage" and isinstance(backend, dict):
                found.append(backend)
            for v in node.values():
                walk(v)
        elif isinstance(node, list | tuple):
            for v in node:
                walk(v)

    walk(doc)
    return found


def describe(store: Any) -> str:
    """How messages name an Icechunk session's store: its snapshot, or its branch when writable."""
    session = store.session
    if session.read_only:
        return f"IcechunkStore(snapshot {session.snapshot_id})"
    return f"IcechunkStore(writable session on {session.branch!r})"


def in_memory(store: Any) -> bool:
    """Whether the repository lives in this process's memory (``icechunk.in_memory_storage``)."""
    return any(b.get("object_store_provider_type") == _MEMORY_PROVIDER for b in _providers(store) or ())


def chunks_folder(store: Any) -> str | None:
    """The local folder of the repository's native chunks; None where the repository is not on a
    local filesystem or the state does not say."""
    roots = {
        str(b.get("path"))
        for b in _providers(store) or ()
        if b.get("object_store_provider_type") == _LOCAL_PROVIDER
    }
    if len(roots) != 1:
        return None
    root = roots.pop()
    return os.path.join(root, "chunks") if os.path.isdir(os.path.join(root, "snapshots")) else None


def for_array(keys: KeyStore, array: zarr.Array) -> Store:
    """The byte paths of ``array`` in an Icechunk session: by its chunk manifest for a read-only
    session; through ``get`` for a writable one (its chunks may change between reads)."""
    store = keys.store
    if not store.session.read_only:
        return keys
    meta = array.metadata
    shape = meta.chunk_grid.chunk_shape  # type: ignore[union-attr]  # icechunk arrays are regular
    grid = tuple(-(-s // c) for s, c in zip(array.shape, shape, strict=True))
    return IcechunkChunks(
        keys=keys,
        array=array.path,
        grid=grid,
        encoding=meta.chunk_key_encoding,  # type: ignore[union-attr]
        folder=chunks_folder(store),
        snapshot=str(store.session.snapshot_id),
    )


@dataclass(frozen=True)
class Manifest:
    """The chunks of one array, sorted by their flat index in the chunk grid.

    Attributes
    ----------
    flat, kinds, offsets, lengths
        Per listed chunk: its flat grid index, ``icechunk.ChunkType`` value, byte offset and length.
    paths
        Per listed chunk: its native chunk id, virtual URL, or "" when inline.
    """

    flat: np.ndarray
    kinds: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    paths: list[str]

    def rows(self, flat: np.ndarray) -> np.ndarray:
        """Each flat index's row, -1 where the array has no such chunk."""
        if not len(self.flat):
            return np.full(len(flat), -1)
        at = np.minimum(np.searchsorted(self.flat, flat), len(self.flat) - 1)
        return np.where(self.flat[at] == flat, at, -1)


_manifests: OrderedDict[tuple[str, str], Manifest] = OrderedDict()
# (session, file) -> the file's (mtime_ns, size) when Icechunk last read from it in that session
_vouched: dict[tuple[str, str], tuple[int, int]] = {}
_lock = threading.Lock()


def _read_manifest(store: Any, array: str, grid: tuple[int, ...]) -> Manifest:
    async def collect() -> list[tuple]:
        return [batch async for batch in store.array_chunk_iterator(array)]

    batches = sync(collect())

    def column(k: int, dtype: Any) -> np.ndarray:
        return (
            np.concatenate([np.asarray(b[k], dtype=dtype) for b in batches])
            if batches
            else np.zeros(0, dtype)
        )

    kinds = column(1, np.uint8)
    if grid:
        coords = np.concatenate([b[0].reshape(-1, len(grid)) for b in batches]) if batches else None
        flat = (
            np.ravel_multi_index(tuple(np.asarray(coords, dtype=np.int64).T), grid) if len(kinds) else kinds
        )
    else:  # a 0-d array: one chunk, at the grid's only place
        flat = np.zeros(len(kinds), dtype=np.int64)
    order = np.argsort(np.asarray(flat, dtype=np.int64), kind="stable")
    paths = [p for b in batches for p in b[2]]
    return Manifest(
        flat=np.asarray(flat, dtype=np.int64)[order],
        kinds=kinds[order],
        # a length past int64 turns negative here, and the bounds check refuses it
        offsets=column(3, np.uint64)[order].astype(np.int64),
        lengths=column(4, np.uint64)[order].astype(np.int64),
        paths=[paths[i] for i in order.tolist()],
    )


@dataclass(frozen=True, eq=False)
class IcechunkChunks(LocatedStore):
    """One array of a read-only Icechunk session.

    Attributes
    ----------
    keys
        The IcechunkStore, read through its ``get`` where a chunk is not in a local file.
    array
        The array's path in the repository.
    grid
        The array's grid of stored keys (chunks, or shards when sharded).
    encoding
        The array's chunk key encoding (zarr-python's), to find a key's grid coordinates.
    folder
        The local folder of the repository's native chunks, or None.
    snapshot
        The session's snapshot id: manifests are kept per process by it.
    """

    keys: KeyStore
    array: str
    grid: tuple[int, ...]
    encoding: Any
    folder: str | None
    snapshot: str

    def location(self, key: str) -> str:
        return self.keys.location(key)

    @property
    def identity(self) -> str:
        """Its snapshot: a read-only session's content, whoever opened it (snapshot ids are unique)."""
        return f"icechunk-snapshot-{self.snapshot}"

    def _manifest(self) -> Manifest:
        name = (self.snapshot, self.array)
        with _lock:
            found = _manifests.get(name)
            if found is not None:
                _manifests.move_to_end(name)
                return found
        built = _read_manifest(self.keys.store, self.array, self.grid)  # outside the lock: may be long
        with _lock:
            _manifests[name] = built
            while len(_manifests) > _CACHED:
                _manifests.popitem(last=False)
        return built

    def locate(self, keys: Sequence[str]) -> list[Range | None]:
        self.keys.check_home()
        manifest = self._manifest()
        skip = len(self.array) + 1 if self.array else 0
        coords = [self.encoding.decode_chunk_key(k[skip:]) for k in keys]
        flat = (
            np.ravel_multi_index(tuple(np.array(coords, dtype=np.int64).reshape(len(keys), -1).T), self.grid)
            if self.grid and keys
            else np.zeros(len(keys), dtype=np.int64)
        )
        out: list[Range | None] = []
        vouched: set[str] = set()  # the files of virtual chunks Icechunk has read from in this call
        for key, row in zip(keys, manifest.rows(np.asarray(flat)).tolist(), strict=True):
            out.append(None if row < 0 else self._range(manifest, row, key, vouched))
        return self.checked(keys, out)

    def _range(self, m: Manifest, row: int, key: str, vouched: set[str]) -> Range:
        kind, where = int(m.kinds[row]), m.paths[row]
        offset, length = int(m.offsets[row]), int(m.lengths[row])
        if kind == _NATIVE and self.folder is not None:
            return Range(os.path.join(self.folder, where), offset, length)
        if kind == _VIRTUAL and where.startswith("file://"):
            path = unquote(urlsplit(where).path)
            if path not in vouched:
                self._vouch(where, path, key)
                vouched.add(path)
            return Range(path, offset, length)
        return Range(key, 0, -1, Source.KEY)

    def _vouch(self, url: str, path: str, key: str) -> None:
        """Icechunk reads a byte of ``key`` (a chunk in the file ``url``) before chunks of that file
        are read directly, in each session and again whenever the file changed since: its refusal (a
        container this session may not read, a file changed since it was referenced) is raised."""
        try:
            st = os.stat(path)
        except FileNotFoundError as e:
            raise StoreError(self.root, key, f"the store places it in {path!r}, which is not there") from e
        stamp, name = (st.st_mtime_ns, st.st_size), (self.keys.identity, url)  # per session opened
        if _vouched.get(name) == stamp:
            return
        got = self.keys.read_range(key, RangeByteRequest(0, 1))
        if got is None:  # the manifest lists it, the session does not give it
            raise StoreError(self.root, key, f"Icechunk lists a virtual chunk in {url} but does not read it")
        with _lock:
            _vouched[name] = stamp
