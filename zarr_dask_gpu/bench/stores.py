"""The bench's stores: dataset A's bytes as users keep them in other stores, and dataset V, a netCDF4
file viewed as zarr by VirtualiZarr.

``opened(kind, path)`` gives what a user of that store passes to ``from_zarr_gpu``: the path itself;
an Icechunk repository on local disk holding the same chunks natively (written beside the dataset
once, reused); an obstore ``LocalStore`` over the same folder; a zarr ``MemoryStore`` holding a copy
of every key (read through the store's own ``get``, the generic reader).

``virtual(path, nbytes)`` writes (or reuses) a netCDF4 file of float32 ``(n, 1024, 1024)`` in chunks of
``(1, 512, 512)`` (1 MiB, a netCDF4 file's usual size), zlib level 4 with shuffle (the netCDF4
chain), and gives its kerchunk references and a read-only Icechunk session of virtual chunks, both
made by VirtualiZarr.
"""

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

STORES = ("icechunk", "obstore", "memory")
VIEWS = ("kerchunk", "icechunk")  # dataset V's VirtualiZarr views
_SIDE = 1024
_CHUNK = (1, 512, 512)  # 1 MiB of float32


def _keys(path: str) -> dict[str, str]:
    """Every key of the zarr hierarchy under ``path`` and its file."""
    out = {}
    for root, _, files in os.walk(path):
        for f in files:
            full = os.path.join(root, f)
            out[os.path.relpath(full, path).replace(os.sep, "/")] = full
    return out


def _copy(store: Any, path: str) -> None:
    """Every key under ``path`` set in ``store``, metadata documents first."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    proto = default_buffer_prototype()
    keys = _keys(path)

    async def put() -> None:
        for key in sorted(keys, key=lambda k: (not k.endswith(("zarr.json", ".zarray", ".zattrs")), k)):
            with open(keys[key], "rb") as f:
                await store.set(key, proto.buffer.from_bytes(f.read()))

    sync(put())


def _icechunk(path: str) -> Any:
    """A read-only session of an Icechunk repository beside ``path`` holding its keys natively."""
    import icechunk

    where = path.rstrip("/") + "-icechunk"
    storage = icechunk.local_filesystem_storage(where)
    if icechunk.Repository.exists(storage):
        repo = icechunk.Repository.open(storage)
        if "complete" in repo.list_tags():
            return repo.readonly_session(tag="complete").store
        raise SystemExit(f"{where}: an Icechunk repository cut short: remove it and run again")
    repo = icechunk.Repository.create(storage)
    session = repo.writable_session("main")
    _copy(session.store, path)
    repo.create_tag("complete", session.commit("the bench's dataset"))
    return repo.readonly_session(tag="complete").store


def opened(kind: str, path: str) -> Any:
    """Dataset ``path`` as a user of store ``kind`` (one of ``STORES``) opens it."""
    import zarr

    if kind == "icechunk":
        return _icechunk(path)
    if kind == "obstore":
        import obstore.store

        return zarr.storage.ObjectStore(obstore.store.LocalStore(path), read_only=True)
    if kind == "memory":
        store = zarr.storage.MemoryStore()
        _copy(store, path)
        return store
    raise ValueError(f"unknown store {kind!r}: {', '.join(STORES)}")


def write_netcdf(path: str, nbytes: int) -> tuple[int, int, int]:
    """A netCDF4 file of about ``nbytes`` of float32 (n, 1024, 1024), variable ``t2m``, reused when
    complete (its ``complete`` attribute is written last); returns its shape."""
    import netCDF4

    n = max(nbytes // (_SIDE * _SIDE * 4), 1)
    shape = (n, _SIDE, _SIDE)
    if os.path.exists(path):
        with netCDF4.Dataset(path) as ds:
            if getattr(ds, "complete", "") == "yes" and ds["t2m"].shape == shape:
                return shape
    with netCDF4.Dataset(path, "w") as ds:
        for name, size in zip(("time", "y", "x"), shape, strict=True):
            ds.createDimension(name, size)
        var = ds.createVariable(
            "t2m",
            "f4",
            ("time", "y", "x"),
            zlib=True,
            shuffle=True,
            complevel=4,
            chunksizes=_CHUNK,
        )
        rng = np.random.default_rng(0)
        y = np.sin(np.linspace(0, 6 * np.pi, _SIDE, dtype=np.float32))[:, None]
        x = np.cos(np.linspace(0, 4 * np.pi, _SIDE, dtype=np.float32))[None, :]
        for z in range(0, n, 16):
            k = np.arange(z, min(z + 16, n), dtype=np.float32)[:, None, None]
            wave = 10 * (y * x)[None] + np.sin(k / 16) + 280
            var[z : z + len(k)] = np.round(wave + rng.standard_normal(wave.shape, dtype=np.float32), 1)
        ds.complete = "yes"
    return shape


@dataclass
class Virtual:
    """Dataset V: its netCDF4 file, its kerchunk references and an Icechunk session of its virtual
    chunks; ``values`` reads the first time steps with netCDF4, for the check."""

    path: str
    shape: tuple[int, int, int]
    references: dict[str, Any]
    icechunk: Any

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 4

    def files(self) -> list[str]:
        return [self.path]

    def values(self, steps: int) -> np.ndarray:
        import netCDF4

        with netCDF4.Dataset(self.path) as ds:
            return np.asarray(ds["t2m"][:steps])

    def opened(self, kind: str) -> tuple[Any, dict[str, Any] | None]:
        """(store, storage_options) of view ``kind`` (one of ``VIEWS``)."""
        if kind == "kerchunk":
            return "reference://", {"fo": self.references}
        return self.icechunk, None


def virtual_dataset(path: str) -> Any:
    """VirtualiZarr's virtual dataset of the local netCDF4/HDF5 file ``path``."""
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser

    registry = ObjectStoreRegistry({"file://": LocalStore()})
    return open_virtual_dataset(f"file://{os.path.abspath(path)}", registry=registry, parser=HDFParser())


def virtual_repository(vds: Any, folder: str, where: str, authorize: bool = True) -> Any:
    """A read-only session of a new Icechunk repository at ``where`` holding ``vds``'s chunks as
    virtual chunks in the files of ``folder`` (their container authorized when the repository is
    opened for reading, unless not ``authorize``)."""
    import icechunk

    prefix = f"file://{os.path.abspath(folder)}/"
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(os.path.abspath(folder)))
    )
    access = icechunk.containers_credentials({prefix: icechunk.credentials.LocalFileSystemAccess})
    storage = icechunk.local_filesystem_storage(where)
    repo = icechunk.Repository.create(storage, config=config, authorize_virtual_chunk_access=access)
    session = repo.writable_session("main")
    vds.vz.to_icechunk(session.store)
    session.commit("virtual chunks")
    reopened = icechunk.Repository.open(storage, authorize_virtual_chunk_access=access if authorize else None)
    return reopened.readonly_session("main").store


def virtual(path: str, nbytes: int) -> Virtual:
    """Dataset V at ``path`` (a netCDF4 file), with its VirtualiZarr views."""
    shape = write_netcdf(path, nbytes)
    vds = virtual_dataset(path)
    where = f"{path}-icechunk"  # the manifest only: the chunks stay in the netCDF4 file
    shutil.rmtree(where, ignore_errors=True)
    store = virtual_repository(vds, os.path.dirname(os.path.abspath(path)), where)
    return Virtual(path, shape, vds.vz.to_kerchunk(format="dict"), store)


def xarray_zarr_peer(view: Virtual) -> Callable[[], None]:
    """The peer of the virtual rows: ``xr.open_dataset(references, engine="zarr")``'s values of the
    variable (zarr-python's read and decode), copied to the device."""

    def run() -> None:
        import cupy as cp
        import xarray as xr

        ds = xr.open_dataset(
            "reference://",
            engine="zarr",
            storage_options={"fo": view.references},
            consolidated=False,
            chunks=None,
        )
        g = cp.asarray(ds["t2m"].values)
        del g

    return run
