"""The same zarr hierarchies in every kind of store users keep zarr data in, for the store matrix.

``reference_tree`` writes, under a local folder, a v3 group ``g3`` (a sparse zstd array ``plain``,
a sharded array ``sharded`` with a crc32c index, an array ``mixed`` holding chunks Icechunk keeps
inline beside native ones) and a v2 group ``g2`` (``plain``, blosc-lz4). Every array has chunks that
were never written, which read as the fill value. ``STORES`` makes the same bytes reachable through
another kind of store, each as the arguments of ``zarr.open_array`` (what the user passes).
"""

import base64
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.storage
from numcodecs import Blosc
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from .helpers import sample

ARRAYS = {"g3": ("plain", "sharded", "mixed"), "g2": ("plain",)}


def reference_tree(root: Path) -> Path:
    """The hierarchies as plain files under ``root``; returns ``root``."""
    zarr.open_group(root, mode="w", zarr_format=3)  # the root is a group too, as xarray opens groups
    g3 = zarr.open_group(root / "g3", mode="w", zarr_format=3)
    plain = g3.create_array(
        "plain", shape=(70, 45), chunks=(16, 15), dtype="f4", fill_value=-1.0, dimension_names=("y", "x")
    )
    plain[:48] = sample((48, 45), "f4")
    plain[64:, 30:] = sample((6, 15), "f4", seed=1)
    sharding = ShardingCodec(
        chunk_shape=(16, 15), codecs=[BytesCodec(), ZstdCodec()], index_codecs=[BytesCodec(), Crc32cCodec()]
    )
    sharded = g3.create_array(
        "sharded",
        shape=(70, 45),
        chunks=(32, 45),
        dtype="i4",
        serializer=sharding,
        compressors=None,
        fill_value=7,
        dimension_names=("y", "x"),
    )
    sharded[:40] = sample((40, 45), "i4")  # the third shard is never written, the second is partial
    mixed = g3.create_array(
        "mixed", shape=(64, 45), chunks=(16, 15), dtype="f4", fill_value=np.nan, dimension_names=("z", "x")
    )
    mixed[:32] = sample((32, 45), "f4", seed=2)
    mixed[32:48] = 0.0  # tiny once compressed: Icechunk keeps such chunks inline in its manifest
    g2 = zarr.open_group(root / "g2", mode="w", zarr_format=2)
    old = g2.create_array(
        "plain",
        shape=(70, 45),
        chunks=(16, 15),
        dtype="<i8",
        fill_value=0,
        compressors=Blosc("lz4", shuffle=Blosc.SHUFFLE),
        attributes={"_ARRAY_DIMENSIONS": ["y", "x"]},
    )
    old[16:60] = sample((44, 45), "i8")
    return root


def files(root: Path) -> dict[str, bytes]:
    """Every key of the tree under ``root`` with its bytes."""
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            out[path.relative_to(root).as_posix()] = path.read_bytes()
    return out


def copy_into(store: Any, items: dict[str, bytes]) -> Any:
    """``items`` set in a writable zarr store, key by key, as zarr-python would have written them."""
    proto = default_buffer_prototype()

    def metadata_first(key: str) -> tuple[bool, int, str]:
        name = key.rsplit("/", 1)[-1]
        return (name not in ("zarr.json", ".zarray", ".zattrs", ".zgroup"), key.count("/"), key)

    async def put() -> None:
        for key in sorted(items, key=metadata_first):
            value = items[key]
            await store.set(key, proto.buffer.from_bytes(value))

    sync(put())
    return store


@dataclass
class Kind:
    """A kind of store: how the tree's bytes are put there, and what a user passes to open it.

    ``make(root, tmp)`` returns ``(store, storage_options)`` for a group: a path, URL or store
    object, and fsspec's options or None. ``icechunk`` kinds hold v3 groups only. ``bound``: its
    data lives in the process's memory.
    """

    make: Callable[[Path, Path], tuple[Any, dict[str, Any] | None]]
    needs: tuple[str, ...] = ()
    v3_only: bool = False
    bound: bool = False
    inner_paths: bool = True  # zarr takes a path inside it (not an fsspec mapper)

    def at(self, root: Path, tmp: Path, path: str) -> tuple[Any, str, dict[str, Any] | None]:
        """What opens the node at ``path`` of the tree: (store, path inside it, storage options)."""
        tmp.mkdir(parents=True, exist_ok=True)
        if self.inner_paths:
            store, options = self.make(root, tmp)
            return store, path, options
        store, options = self.make(root / path, tmp)
        return store, "", options


def _zip(root: Path, tmp: Path) -> Path:
    target = tmp / "tree.zip"
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_STORED) as z:
        for key, value in files(root).items():
            z.writestr(key, value)
    return target


def _memory_store(root: Path, tmp: Path) -> tuple[Any, None]:
    return copy_into(zarr.storage.MemoryStore(), files(root)), None


def _fsspec_memory(root: Path, tmp: Path) -> tuple[Any, None]:
    import fsspec

    fs = fsspec.filesystem("memory")
    base = f"/{tmp.name}"
    for key, value in files(root).items():
        fs.pipe(f"{base}/{key}", value)
    return f"memory://{base}", None


def _obstore(memory: bool) -> Callable[[Path, Path], tuple[Any, None]]:
    def make(root: Path, tmp: Path) -> tuple[Any, None]:
        import obstore.store

        if memory:
            inner = obstore.store.MemoryStore()
            for key, value in files(root).items():
                obstore.put(inner, key, value)
        else:
            inner = obstore.store.LocalStore(str(root))
        return zarr.storage.ObjectStore(inner, read_only=True), None

    return make


def _icechunk(writable: bool) -> Callable[[Path, Path], tuple[Any, None]]:
    def make(root: Path, tmp: Path) -> tuple[Any, None]:
        import icechunk

        repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp / "repo")))
        session = repo.writable_session("main")
        copy_into(session.store, {k: v for k, v in files(root).items() if k.startswith("g3/")})
        if writable:
            return session.store, None
        session.commit("the tree")
        return repo.readonly_session("main").store, None

    return make


def kerchunk_references(root: Path) -> dict[str, Any]:
    """kerchunk references (version 1) to the tree's files: metadata inline, every chunk a
    ``[url, offset, length]`` triple, a few small chunks inline as base64."""
    refs: dict[str, Any] = {}
    for key, value in files(root).items():
        if key.rsplit("/", 1)[-1] in ("zarr.json", ".zarray", ".zattrs", ".zgroup"):
            refs[key] = value.decode()
        elif len(value) < 200:
            refs[key] = "base64:" + base64.b64encode(value).decode()
        else:
            refs[key] = [f"file://{root / key}", 0, len(value)]
    return {"version": 1, "refs": refs}


def _references(root: Path, tmp: Path) -> tuple[Any, dict[str, Any]]:
    target = tmp / "refs.json"
    target.write_text(json.dumps(kerchunk_references(root)))
    return "reference://", {"fo": str(target)}


def _mapper(root: Path) -> Any:
    import fsspec

    return fsspec.get_mapper(str(root))


def _fsspec_store(url: str) -> Any:
    return zarr.storage.FsspecStore.from_url(url)


def _upath(root: Path, tmp: Path) -> tuple[Any, None]:
    from upath import UPath

    return UPath(f"file://{root}"), None


STORES: dict[str, Kind] = {
    "path": Kind(lambda root, tmp: (str(root), None)),
    "pathlib": Kind(lambda root, tmp: (root, None)),
    "upath": Kind(_upath, needs=("upath",)),
    "file-url": Kind(lambda root, tmp: (f"file://{root}", None)),
    "fsspec-mapper": Kind(lambda root, tmp: (_mapper(root), None), inner_paths=False),
    "zarr-localstore": Kind(lambda root, tmp: (zarr.storage.LocalStore(root), None)),
    "zarr-fsspecstore-file": Kind(
        lambda root, tmp: (zarr.storage.FsspecStore.from_url(f"file://{root}"), None)
    ),
    "zip-url": Kind(lambda root, tmp: (f"zip::file://{_zip(root, tmp)}", None)),
    "zipstore": Kind(lambda root, tmp: (zarr.storage.ZipStore(_zip(root, tmp), mode="r"), None)),
    "simplecache-url": Kind(
        lambda root, tmp: (f"simplecache::file://{root}", {"simplecache": {"cache_storage": str(tmp / "c")}})
    ),
    "memory-url": Kind(_fsspec_memory, bound=True),
    "memorystore": Kind(_memory_store, bound=True),
    "obstore-local": Kind(_obstore(memory=False), needs=("obstore",)),
    "obstore-memory": Kind(_obstore(memory=True), needs=("obstore",), bound=True),
    "icechunk": Kind(_icechunk(writable=False), needs=("icechunk",), v3_only=True),
    "icechunk-writable": Kind(_icechunk(writable=True), needs=("icechunk",), v3_only=True),
    "reference-url": Kind(_references, needs=("kerchunk",)),
}


def expected(root: Path, group: str, name: str) -> np.ndarray:
    """zarr-python's read of the reference tree's own files: the values every store must give."""
    return zarr.open_array(str(root / group / name), mode="r")[...]


def available(kind: Kind) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in kind.needs)
