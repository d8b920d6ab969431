"""Where an array's bytes live: local files or fsspec URLs, as one small contract.

A ``Store`` answers everything that depends on the kind of storage: how a key becomes a path, how
a zarr array or group there is opened, how unsharded chunks are located, how a byte range (a shard's
index) is read, which host reader reads chunk ranges and which device reader the GPU backend uses.
Code elsewhere asks the store and never branches on its kind. The contract follows zarr-python's
``Store.get_partial_values`` with its ``ByteRequest`` types, reduced to what a read task needs.

Stores are small frozen dataclasses: ``ArrayInfo`` holds one and every task carries it, so an
fsspec filesystem is never pickled but found again in each process (one per set of options).
"""

import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import fsspec
import numpy as np
import zarr
import zarr.storage
from dask.base import tokenize
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest

from . import _preads, config
from .extras import require
from .io import ChunkReader, HostReader
from .retry import as_oserror, retrying, transient
from .storage import Range, native_threads

DeviceReader = Literal["cufile", "kvikio", "fsspec"]


def is_url(path: str) -> bool:
    """A remote location (``s3://``, ``http(s)://``, ...) rather than a local path."""
    return "://" in path and not path.startswith("file://")


# URL schemes and the fsspec implementation each needs
_FILESYSTEMS = {"s3": "s3fs", "s3a": "s3fs", "http": "aiohttp", "https": "aiohttp"}


def _require_filesystem(url: str) -> None:
    scheme = url.split("://", 1)[0].lower()
    require("fsspec", f"reading {scheme}:// URLs")
    if scheme in _FILESYSTEMS:
        require(_FILESYSTEMS[scheme], f"reading {scheme}:// URLs")


# URL schemes kvikio.RemoteFile reads
_KVIKIO_SCHEMES = ("http://", "https://", "s3://")


class Store(ABC):
    """The storage holding a zarr hierarchy: local files, or objects read through fsspec.

    Attributes
    ----------
    root
        Absolute path of the root folder, or its URL (``s3://``, ``http(s)://``).
    storage_options
        The fsspec options of a URL, None for local files.
    """

    root: str
    storage_options: dict[str, Any] | None = None

    @abstractmethod
    def path(self, key: str) -> str:
        """The file or URL of ``key`` (``/``-separated, relative to the root; "" is the root)."""

    @abstractmethod
    def open_array(self, path: str) -> zarr.Array:
        """zarr-python's array at ``path`` inside the store, read-only."""

    @abstractmethod
    def open_group(self, path: str) -> zarr.Group:
        """zarr-python's group at ``path`` inside the store, read-only."""

    @abstractmethod
    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        """Each object of ``paths`` (unsharded chunks) as a range of the whole object; None where it
        is known to be missing. A size of -1 means unknown: the reader finds it, and whether the
        object exists, by reading it."""

    @abstractmethod
    def size(self, path: str) -> int | None:
        """The size of the object at ``path``, None when it does not exist. Transient errors are
        retried (``retry.retrying``)."""

    @abstractmethod
    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        """The size of the object at ``path`` and the bytes ``request`` asks of it (a
        ``RangeByteRequest``, ``OffsetByteRequest`` or ``SuffixByteRequest``, clipped to the object);
        None when it does not exist. Transient errors are retried (``retry.retrying``).

        A server that ignores range requests may answer more bytes than asked: the caller checks.
        """

    @abstractmethod
    def host_reader(self) -> ChunkReader:
        """The reader of chunk ranges into host memory."""

    @abstractmethod
    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        """Which reader the GPU backend reads this store's ranges with: "cufile" (kvikio CuFile
        preads of local files, batched across blocks), "kvikio" (kvikio.RemoteFile range reads into
        device memory) or "fsspec" (the host reader, then one copy to the device).

        ``remote_file_available`` tells whether this kvikio has remote-file support; it is only
        asked where the answer matters (the GPU module owns the kvikio import).
        """


def _bounds(request: ByteRequest, size: int) -> tuple[int, int]:
    """The [start, end) a byte request asks of an object of ``size`` bytes, clipped to it."""
    if isinstance(request, RangeByteRequest):
        return request.start, min(request.end, size)
    if isinstance(request, OffsetByteRequest):
        return request.offset, size
    if isinstance(request, SuffixByteRequest):
        return max(size - request.suffix, 0), size
    raise TypeError(f"not a byte request: {request!r}")


@dataclass(frozen=True)
class LocalStore(Store):
    """Files under a local folder: native batches of preads and stats, kvikio CuFile on the GPU."""

    root: str
    storage_options: None = None

    def path(self, key: str) -> str:  # as os.path.join, at a third of its cost (once per chunk)
        if not key:
            return self.root
        sep = "" if self.root.endswith(os.sep) else os.sep
        return f"{self.root}{sep}{key.replace('/', os.sep)}"

    def open_array(self, path: str) -> zarr.Array:
        return zarr.open_array(zarr.storage.LocalStore(self.root, read_only=True), path=path, mode="r")

    def open_group(self, path: str) -> zarr.Group:
        return zarr.open_group(zarr.storage.LocalStore(self.root, read_only=True), path=path, mode="r")

    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        """Each file whole, None where it does not exist: sized in one native batch without the GIL
        (a stat each from Python cost 8 us a file of dataset B's 4096)."""
        paths = list(paths)
        sizes = np.empty(len(paths), dtype=np.int64)
        errors = np.zeros(len(paths), dtype=np.int32)
        _preads.sizes(paths, sizes, errors, native_threads(len(paths)))
        if errors.any():  # other than a missing file: a directory where a chunk should be, permissions
            k = int(np.flatnonzero(errors)[0])
            raise OSError(int(errors[k]), os.strerror(int(errors[k])), paths[k])
        return [Range(p, 0, n) if n >= 0 else None for p, n in zip(paths, sizes.tolist(), strict=True)]

    def size(self, path: str) -> int | None:
        try:
            return retrying(path, lambda: os.stat(path).st_size)
        except FileNotFoundError:
            return None

    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        def read() -> tuple[int, bytes]:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start, end = _bounds(request, size)
                return size, os.pread(f.fileno(), max(end - start, 0), start)

        try:
            return retrying(path, read)
        except FileNotFoundError:
            return None

    def host_reader(self) -> HostReader:
        return HostReader(None)

    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        return "cufile"


_filesystems: dict[str, Any] = {}
_fs_lock = threading.Lock()


@dataclass(frozen=True)
class FsspecStore(Store):
    """Objects under a URL (``s3://``, ``http(s)://``, ...) read through fsspec with
    ``storage_options``; on the GPU by kvikio.RemoteFile where ``remote-io`` allows it."""

    root: str
    storage_options: dict[str, Any] | None = None

    @property
    def fs(self) -> Any:
        """The fsspec filesystem of this store, one per process, scheme and set of storage options."""
        key = tokenize(self.root.split("://")[0], self.storage_options)
        with _fs_lock:
            if key not in _filesystems:
                _filesystems[key] = fsspec.core.url_to_fs(self.root, **(self.storage_options or {}))[0]
            return _filesystems[key]

    def path(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    def open_array(self, path: str) -> zarr.Array:
        # a busy server's 503 on zarr.json is retried, as chunk reads are
        opts = self.storage_options or {}
        return retrying(
            self.root,
            as_oserror(
                lambda: zarr.open_array(self.root, path=path, mode="r", storage_options=opts), transient
            ),
        )

    def open_group(self, path: str) -> zarr.Group:
        return zarr.open_group(self.root, path=path, mode="r", storage_options=self.storage_options or {})

    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        """Each object of unknown size (-1): whether it exists is found by reading it."""
        return [Range(p, 0, -1) for p in paths]

    def size(self, path: str) -> int | None:
        try:
            return retrying(path, as_oserror(lambda: int(self.fs.size(path))))
        except FileNotFoundError:
            return None

    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        def read() -> tuple[int, bytes]:
            fs = self.fs
            size = fs.size(path)
            start, end = _bounds(request, size)
            return size, fs.cat_file(path, start=start, end=end)

        try:
            return retrying(path, as_oserror(read))
        except FileNotFoundError:
            return None

    def host_reader(self) -> HostReader:
        return HostReader(self.fs)

    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        """``zarr_dask_gpu.remote-io``: "auto" is kvikio when this kvikio has remote support and the URL
        is HTTP(S) or S3; "kvikio" always (an error where it cannot); "fsspec" never."""
        mode = config.choice("remote-io")  # its choices are its row in config.SETTINGS
        if mode == "fsspec":
            return "fsspec"
        fits = self.root.startswith(_KVIKIO_SCHEMES)
        if mode == "kvikio":
            available = remote_file_available()
            if not (fits and available):
                raise ValueError(
                    f"remote-io='kvikio' cannot read {self.root}: kvikio reads HTTP(S) and S3 URLs, "
                    f"and this kvikio {'has' if available else 'lacks'} remote support"
                )
            return "kvikio"
        return "kvikio" if fits and remote_file_available() else "fsspec"


def store_for(location: str, storage_options: dict[str, Any] | None = None) -> Store:
    """The store at a local path or a URL: a URL is read through fsspec (whose filesystem for its
    scheme must be installed), anything else is a local folder."""
    if is_url(location):
        _require_filesystem(location)
        return FsspecStore(location.rstrip("/"), dict(storage_options or {}))
    return LocalStore(os.path.abspath(location))
