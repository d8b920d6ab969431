"""The front door: whatever zarr-python opens (paths, ``pathlib``/``UPath`` objects, fsspec URLs with
``storage_options``, chained URLs, zarr ``Store`` objects, ``zarr.Array`` and ``zarr.Group``) is
opened by zarr-python's own store resolution; then the byte paths of the store it opened are chosen
by that store object (``byte_store``), never by rebuilding a location from a string.
"""

import os
import pickle
import sys
import uuid
from typing import Any

import numpy as np
import zarr
import zarr.storage
from zarr.core.metadata import ArrayV3Metadata
from zarr.core.sync import sync
from zarr.storage import StorePath
from zarr.storage._common import make_store_path

from .codecs.chain import classify, shard_layout
from .errors import MetadataError, StoreError, UnsupportedDtypeError, UnsupportedLayoutError
from .metadata import ArrayInfo
from .storage.retry import as_oserror, retrying, transient
from .storage.stores import FsspecStore, KeyStore, LocalStore, Store, process_token, require_filesystem

# fsspec protocols whose objects this package reads itself (FsspecStore: range requests, kvikio)
_REMOTE_PROTOCOLS = frozenset({"s3", "s3a", "http", "https"})


def describe(store: Any) -> str:
    """How messages name a zarr store: its type and where it is."""
    if isinstance(store, zarr.storage.FsspecStore):
        fs = _unwrapped(store.fs)
        return f"FsspecStore({type(fs).__name__}, {fs.unstrip_protocol(store.path)!r})"
    icechunk = sys.modules.get("icechunk")
    if icechunk is not None and isinstance(store, icechunk.IcechunkStore):
        from .storage.icechunk_store import describe as named

        return named(store)
    return f"{type(store).__name__}({str(store)!r})"


def safe_component(component: str) -> str:
    """``component`` as a path inside the store; ``MetadataError`` where it would leave the store."""
    parts = component.replace("\\", "/").split("/")
    if component.startswith(("/", "\\")) or ".." in parts:
        raise MetadataError(f"component {component!r} leaves the store root")
    return "/".join(p for p in parts if p not in ("", "."))


def store_path(store: Any, storage_options: dict[str, Any] | None = None) -> StorePath:
    """zarr-python's resolution of anything it opens, read-only.

    Raises
    ------
    StoreError
        zarr-python does not take ``store`` (its type, or ``storage_options`` it would not use).
    """
    if isinstance(store, zarr.Array | zarr.Group):
        return store.store_path
    if isinstance(store, str):
        for part in store.split("::"):  # each filesystem of a chained URL
            require_filesystem(part)
    try:
        return sync(make_store_path(store, mode="r", storage_options=storage_options))
    except FileNotFoundError as e:
        raise MetadataError(f"cannot open {store!r}: {e}") from e
    except (TypeError, ValueError) as e:  # zarr's refusals of the argument itself
        raise StoreError(
            repr(store) if isinstance(store, str | os.PathLike) else type(store).__name__,
            "",
            f"zarr-python cannot open it: {e}; pass what zarr.open_array takes (a path, an fsspec URL "
            "with storage_options, a zarr Store, a zarr.Array or zarr.Group)",
        ) from e


def open_node(
    store: Any, component: str | None = None, storage_options: dict[str, Any] | None = None
) -> zarr.Array:
    """The zarr array at ``component`` of ``store`` (anything zarr-python opens), read-only.

    Raises
    ------
    MetadataError
        No array is there (the message says what is: a group and its arrays, or the root group's),
        or ``component`` leaves the store.
    StoreError
        zarr-python does not take ``store``.
    """
    if component is not None and not isinstance(component, str):
        raise TypeError(f"component must be a str (a path inside the group), not {type(component).__name__}")
    if isinstance(store, zarr.Array):
        if component:
            raise ValueError("component cannot be given with an open zarr.Array")
        return store
    where = store_path(store, storage_options)
    path = safe_component(component or "")
    label = f"{describe(where.store)}/{'/'.join(p for p in (where.path, path) if p)}"
    try:  # a busy server's 503 on zarr.json is retried, as chunk reads are
        node = retrying(label, as_oserror(lambda: zarr.open(where, path=path, mode="r"), transient))
    except Exception as e:  # zarr raises many types; we give one, naming the place
        found = _why_no_array(where, path)
        if found and found[0]:
            raise MetadataError(f"no zarr array at {label}: {found[1]}") from e
        hint = f"; {found[1]}" if found else ""
        raise MetadataError(f"cannot open a zarr array at {label}: {type(e).__name__}: {e}{hint}") from e
    if isinstance(node, zarr.Group):
        raise MetadataError(f"no zarr array at {label}: {_group_arrays(node, path)}")
    return node


def open_group(store: Any, storage_options: dict[str, Any] | None = None) -> zarr.Group:
    """The zarr group at ``store`` (anything zarr-python opens), read-only.

    Raises
    ------
    MetadataError
        No group is there.
    StoreError
        zarr-python does not take ``store``.
    """
    if isinstance(store, zarr.Group):
        return store
    where = store_path(store, storage_options)
    try:
        return zarr.open_group(where, mode="r")
    except Exception as e:  # zarr raises many types; we give one, naming the place
        label = f"{describe(where.store)}/{where.path}".rstrip("/")
        raise MetadataError(f"no zarr group at {label}: {type(e).__name__}: {e}") from e


def _arrays_of(group: zarr.Group, path: str) -> str:
    """The arrays under ``group`` (at ``path``) as messages list them; "" when there are none."""
    arrays = sorted(
        f"{path}/{name}" if path else name
        for name, member in group.members(max_depth=None)
        if isinstance(member, zarr.Array)
    )
    shown = ", ".join(repr(a) for a in arrays[:20])
    return shown + (f" and {len(arrays) - 20} more" if len(arrays) > 20 else "")


def _group_arrays(group: zarr.Group, path: str) -> str:
    shown = _arrays_of(group, path)
    if not shown:
        return "it is a zarr group that holds no arrays"
    return f"it is a zarr group: pass component= (--component), one of its arrays: {shown}"


def _why_no_array(where: StorePath, path: str) -> tuple[bool, str] | None:
    """Where no array opens, what is there instead, for the message: whether ``path`` is a group, and
    its arrays or the root group's; None when there is no group at either."""
    for at in dict.fromkeys([path, ""]):  # the component itself, then the root
        try:
            group = zarr.open_group(where, path=at, mode="r")
        except Exception:  # no group there either
            continue
        if at == path:
            return True, _group_arrays(group, at)
        shown = _arrays_of(group, at)
        return False, f"the store's root group holds {'the arrays ' + shown if shown else 'no arrays'}"
    return None


def _unwrapped(fs: Any) -> Any:
    return getattr(fs, "sync_fs", fs)  # fsspec's AsyncFileSystemWrapper around a synchronous one


def process_bound(store: Any) -> bool:
    """Whether a zarr store's data lives in its process's memory: a copy in another process would be
    another store (an empty one, for fsspec's memory filesystem)."""
    from fsspec.implementations.memory import MemoryFileSystem

    if isinstance(store, zarr.storage.WrapperStore):
        return process_bound(store._store)
    if isinstance(store, zarr.storage.MemoryStore):
        return True
    if isinstance(store, zarr.storage.FsspecStore):
        fs = _unwrapped(store.fs)
        while fs is not None:  # a chain: simplecache::memory://, ...
            if isinstance(fs, MemoryFileSystem):
                return True
            fs = _unwrapped(getattr(fs, "fs", None))
        return False
    obstore = sys.modules.get("obstore.store")
    if obstore is not None and isinstance(store, zarr.storage.ObjectStore):
        return isinstance(store.store, obstore.MemoryStore)
    icechunk = sys.modules.get("icechunk")
    if icechunk is not None and isinstance(store, icechunk.IcechunkStore):
        from .storage.icechunk_store import in_memory

        return in_memory(store)
    return False


def byte_store(array: zarr.Array) -> Store:
    """Where ``array``'s bytes are read from, chosen by its zarr store object: local files (a zarr
    ``LocalStore``, fsspec's local filesystem, an obstore ``LocalStore``) by preads and kvikio; S3 and
    HTTP(S) objects by fsspec range requests or kvikio; kerchunk references and read-only Icechunk
    sessions by where each chunk lies; any other store through its own ``get``."""
    store = array.store
    if isinstance(store, zarr.storage.LocalStore):
        return LocalStore(os.path.abspath(str(store.root)))
    if isinstance(store, zarr.storage.FsspecStore):
        found = _fsspec_store(store)
        if found is not None:
            return found
    obstore = sys.modules.get("obstore.store")
    if (
        obstore is not None
        and isinstance(store, zarr.storage.ObjectStore)
        and isinstance(store.store, obstore.LocalStore)
        and store.store.prefix is not None
    ):
        return LocalStore(os.path.abspath(str(store.store.prefix)))
    keys = key_store(store)
    icechunk = sys.modules.get("icechunk")
    if icechunk is not None and isinstance(store, icechunk.IcechunkStore):
        from .storage.icechunk_store import for_array

        return for_array(keys, array)
    return keys


def key_store(store: Any) -> KeyStore:
    """Any zarr store, read through its own ``get``. Its ``key`` is new at every opening: no text (a
    repr, a URL of a chained filesystem) tells every store apart, and an object's id is reused once
    it is freed, while results of a graph over it may live on (persisted on a cluster)."""
    home = process_token() if process_bound(store) else None
    return KeyStore(store, describe(store), home, serial(store), uuid.uuid4().hex)


def serial(store: Any) -> bool:
    """Whether a zarr store's reads must not overlap: fsspec's archive filesystems (``zip::``,
    ``tar::``) read members of one shared file object, and overlapping reads garble each other
    (zarr-python's own threaded reads of them fail so)."""
    from fsspec.implementations.tar import TarFileSystem
    from fsspec.implementations.zip import ZipFileSystem

    if isinstance(store, zarr.storage.WrapperStore):
        return serial(store._store)
    return isinstance(store, zarr.storage.FsspecStore) and isinstance(
        _unwrapped(store.fs), ZipFileSystem | TarFileSystem
    )


def _fsspec_store(store: zarr.storage.FsspecStore) -> Store | None:
    from fsspec.implementations.local import LocalFileSystem
    from fsspec.implementations.reference import ReferenceFileSystem

    fs = _unwrapped(store.fs)
    if isinstance(fs, LocalFileSystem):
        return LocalStore(fs._strip_protocol(store.path))
    if isinstance(fs, ReferenceFileSystem) and isinstance(fs.references, dict):
        from .storage.references import ReferenceStore

        return ReferenceStore(key_store(store), store.path.strip("/"))
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if protocols & _REMOTE_PROTOCOLS:
        # zarr's filesystem is asynchronous, on zarr's loop; ours is a plain one with the same options
        options = {k: v for k, v in fs.storage_options.items() if k not in ("asynchronous", "loop")}
        return FsspecStore(fs.unstrip_protocol(store.path).rstrip("/"), options)
    return None


def refuse_stranded(store: Store) -> None:
    """Before a graph is built: a store that cannot reach the current dask cluster's workers (its
    data in this process's memory, or a store zarr cannot pickle) raises ``StoreError`` naming it
    and what to use. Nothing is asked where no distributed client is current, or where every worker
    runs in this process."""
    keys = getattr(store, "keys", store)
    if not isinstance(keys, KeyStore) or not _workers_elsewhere():
        return
    keys.check_home(elsewhere=True)
    try:
        pickle.dumps(keys.store)
    except Exception as e:
        raise StoreError(
            keys.root,
            "",
            f"it cannot be sent to the cluster's worker processes ({type(e).__name__}: {e}); "
            "open a store that pickles (for Icechunk, a readonly_session's store)",
        ) from e


def _workers_elsewhere() -> bool:
    """A distributed client is current and some of its workers run in other processes."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        client = distributed.default_client()
    except ValueError:  # no client: dask's local schedulers, threads of this process
        return False
    here = {w.address for w in distributed.Worker._instances}
    workers = client.scheduler_info(n_workers=-1).get("workers", {})
    return any(address not in here for address in workers)


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


def _check_addressed(where: Store, path: str, arr: zarr.Array) -> None:
    """Where this package finds a store's objects itself (local files, remote objects by URL), the
    array's metadata document is where it would look: a chunk it cannot find is then absent, never
    misaddressed. One stat, or one request, when the array is opened."""
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
