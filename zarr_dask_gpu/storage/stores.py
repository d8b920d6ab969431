"""Where an array's bytes live, as one small contract: local files, remote objects, or the keys of a
zarr-python store that only its ``get`` can read.

A ``Store`` answers everything that depends on the kind of storage: how a key becomes a path, how
unsharded chunks are located, how a byte range (a shard's index) is read, how a part of an object is
addressed, how ranges that are not local files are fetched, and which device reader the GPU backend
uses. Code elsewhere asks the store and never branches on its kind. The contract follows
zarr-python's ``Store.get_partial_values`` with its ``ByteRequest`` types, reduced to what a read task
needs. Which ``Store`` reads a zarr-python store is decided by that store object (``resolve``).

``ArrayInfo`` holds one store and every task carries it: a local or remote store is a few strings (an
fsspec filesystem is found again in each process, one per set of options); a ``KeyStore`` carries
the zarr-python store itself, as zarr pickles it.
"""

import asyncio
import contextlib
import errno
import os
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import fsspec
import numpy as np
import zarr
from dask.base import tokenize
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from .. import _preads, config
from ..errors import StoreError
from ..extras import require
from .retry import as_oserror, retrying, transient
from .units import Range, Source, coalesce, native_threads


class DeviceReader(StrEnum):
    """The reader the GPU backend reads a store's ranges with."""

    CUFILE = "cufile"  # kvikio CuFile preads of local files, batched across blocks
    REMOTE_FILE = "kvikio"  # kvikio.RemoteFile range reads of HTTP(S) and S3 objects into device memory
    HOST = "host"  # the store's host reader into pinned memory, then one copy to the device


Blob = bytes | np.ndarray  # a fetched range: bytes, or a uint8 view of a zarr buffer

# URL schemes and the fsspec implementation each needs
_FILESYSTEMS = {"s3": "s3fs", "s3a": "s3fs", "http": "aiohttp", "https": "aiohttp"}


def require_filesystem(url: str) -> None:
    """``ImportError`` naming the extra to install where ``url``'s scheme needs a package that is not
    installed."""
    scheme = url.split("://", 1)[0].lower()
    if "://" in url and scheme in _FILESYSTEMS:
        require(_FILESYSTEMS[scheme], f"reading {scheme}:// URLs")


# URL schemes kvikio.RemoteFile reads
_KVIKIO_SCHEMES = ("http://", "https://", "s3://")


class Store(ABC):
    """The storage holding a zarr hierarchy, as a read task reaches its bytes.

    Attributes
    ----------
    root
        Absolute path of the root folder, its URL, or the zarr store's name (``KeyStore``).
    storage_options
        The fsspec options of a URL, None otherwise.
    """

    root: str
    storage_options: dict[str, Any] | None = None

    @abstractmethod
    def path(self, key: str) -> str:
        """The file, URL or store key of ``key`` (``/``-separated, relative to the root; "" is the
        root), as ``whole``, ``read_range`` and ``part`` take it."""

    def location(self, key: str) -> str:
        """How messages name ``key``: its file or URL, or the store and the key."""
        return self.path(key)

    @property
    def identity(self) -> str:
        """What tells this store from every other in dask's names: its root, and its options."""
        return tokenize(type(self).__name__, self.root, self.storage_options)

    @abstractmethod
    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        """Each object of ``paths`` (unsharded chunks) as a range of the whole object; None where the
        store says it is absent. A size of -1 means unknown: the reader finds it, and whether the
        object exists, by reading it."""

    @abstractmethod
    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        """The size of the object at ``path`` and the bytes ``request`` asks of it (a
        ``RangeByteRequest``, ``OffsetByteRequest`` or ``SuffixByteRequest``, clipped to the object);
        None when the store says it is absent. Transient errors are retried (``retry.retrying``).

        A server that ignores range requests may answer more bytes than asked: the caller checks.
        """

    @abstractmethod
    def parts(self, path: str, spans: Sequence[tuple[int, int]]) -> list[Range]:
        """The ``(offset, size)`` spans of the object at ``path`` (the inner chunks of a shard),
        the object located once."""

    @property
    def fetcher(self) -> "Store | None":
        """The store whose ``fetch`` reads this store's ranges that are not local files; None where
        every range is a local file. Blocks of stores with the same fetcher are read in one batch."""
        return self

    def fetch(self, ranges: Sequence[Range]) -> list[Blob | None]:
        """The bytes of ranges that are not local files (``Source.URL``, ``Source.KEY``), as the store
        gave them (no copy where it can be helped); None where a whole object (size -1) is absent. A
        ranged read that comes back short raises."""
        raise StoreError(self.location(""), "", "this store's chunks are local files, read by preads")

    @abstractmethod
    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        """Which reader the GPU backend reads this store's ranges with (a block whose ranges are not
        all local files goes the host's way, whatever the store's reader).

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


def read_file_range(
    path: str, request: ByteRequest, base: int = 0, length: int | None = None
) -> tuple[int, bytes]:
    """``request`` of the object at ``[base, base + length)`` of the local file ``path`` (the whole
    file when ``length`` is None): the object's size and the bytes; FileNotFoundError where the file
    is absent, a short read where the file ends before the object does."""

    def read() -> tuple[int, bytes]:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size - base if length is None else length
            start, end = _bounds(request, size)
            want = max(end - start, 0)
            data = os.pread(f.fileno(), want, base + start)
            if len(data) != want:
                raise OSError(
                    errno.EIO, f"short read of {path}: {len(data)} of {want} bytes at {base + start}"
                )
            return size, data

    return retrying(path, read)


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

    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        """Each file whole, None where it does not exist: sized in one native batch without the GIL
        (a stat each from Python adds up over a store's thousands of small files)."""
        paths = list(paths)
        sizes = np.empty(len(paths), dtype=np.int64)
        errors = np.zeros(len(paths), dtype=np.int32)
        _preads.sizes(paths, sizes, errors, native_threads(len(paths)))
        if errors.any():  # other than a missing file: a directory where a chunk should be, permissions
            k = int(np.flatnonzero(errors)[0])
            raise OSError(int(errors[k]), os.strerror(int(errors[k])), paths[k])
        return [Range(p, 0, n) if n >= 0 else None for p, n in zip(paths, sizes.tolist(), strict=True)]

    @property
    def fetcher(self) -> None:
        return None

    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        try:
            return read_file_range(path, request)
        except FileNotFoundError:
            return None

    def parts(self, path: str, spans: Sequence[tuple[int, int]]) -> list[Range]:
        return [Range(path, offset, size) for offset, size in spans]

    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        return DeviceReader.CUFILE


_filesystems: dict[str, Any] = {}
_fs_lock = threading.Lock()


@dataclass(frozen=True)
class FsspecStore(Store):
    """Objects under a URL (``s3://``, ``http(s)://``) read through fsspec with ``storage_options``;
    on the GPU by kvikio.RemoteFile where ``remote-io`` allows it."""

    root: str
    storage_options: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        require_filesystem(self.root)

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

    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        """Each object of unknown size (-1): whether it exists is found by reading it."""
        return [Range(p, 0, -1, Source.URL) for p in paths]

    def size(self, path: str) -> int | None:
        """The size of the object at ``path``, None when it does not exist. Transient errors are
        retried (``retry.retrying``)."""
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

    def parts(self, path: str, spans: Sequence[tuple[int, int]]) -> list[Range]:
        return [Range(path, offset, size, Source.URL) for offset, size in spans]

    def fetch(self, ranges: Sequence[Range]) -> list[Blob | None]:
        """Whole objects by one ``cat`` (a missing one is a missing chunk), ranges merged by
        ``coalesce`` and read by one ``cat_ranges``, both with fsspec's concurrency."""
        fs = self.fs
        blobs: list[Blob | None] = [None] * len(ranges)
        whole = [i for i, r in enumerate(ranges) if r.size < 0]
        if whole:
            paths = [ranges[i].path for i in whole]
            got = retrying(paths[0], as_oserror(lambda: _raise_failed(fs.cat(paths, on_error="return"))))
            got = {fs._strip_protocol(k): v for k, v in got.items()}  # s3fs drops the protocol, http keeps it
            for i, p in zip(whole, paths, strict=True):
                data = got[fs._strip_protocol(p)]
                blobs[i] = None if isinstance(data, FileNotFoundError) else data
        reads = coalesce([r if r.size >= 0 else None for r in ranges])
        if reads:
            where = [rd.path for rd in reads]
            starts, ends = [rd.offset for rd in reads], [rd.offset + rd.size for rd in reads]
            got = retrying(
                where[0],
                as_oserror(lambda: _raise_failed(fs.cat_ranges(where, starts, ends, on_error="return"))),
            )
            for rd, data in zip(reads, got, strict=True):
                if not isinstance(data, FileNotFoundError) and len(data) > rd.size:
                    raise OSError(
                        errno.EIO,
                        f"{rd.path}: the server sent {len(data)} bytes for a {rd.size}-byte range: it "
                        "ignores byte-range (HTTP Range) requests, which shards and partial reads need",
                    )
                if isinstance(data, FileNotFoundError) or len(data) != rd.size:
                    raise OSError(
                        errno.EIO, f"short read of {rd.path}: {len(data)} of {rd.size} bytes at {rd.offset}"
                    )
                for unit, at in rd.members:
                    blobs[unit] = data[at : at + ranges[unit].size]
        return blobs

    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        """``zarr_dask_gpu.remote-io``: "auto" is kvikio when this kvikio has remote support and the URL
        is HTTP(S) or S3; "kvikio" always (an error where it cannot); "fsspec" never."""
        mode = config.choice("remote-io")  # its choices are its row in config.SETTINGS
        if mode == "fsspec":
            return DeviceReader.HOST
        fits = self.root.startswith(_KVIKIO_SCHEMES)
        if mode == "kvikio":
            available = remote_file_available()
            if not (fits and available):
                raise ValueError(
                    f"remote-io='kvikio' cannot read {self.root}: kvikio reads HTTP(S) and S3 URLs, "
                    f"and this kvikio {'has' if available else 'lacks'} remote support"
                )
            return DeviceReader.REMOTE_FILE
        return DeviceReader.REMOTE_FILE if fits and remote_file_available() else DeviceReader.HOST


def _raise_failed(results: Any) -> Any:
    """fsspec's ``on_error="return"`` results, raising the first error other than a missing object."""
    values = results.values() if isinstance(results, dict) else results
    for v in values:
        if isinstance(v, BaseException) and not isinstance(v, FileNotFoundError):
            raise v
    return results


_serial = threading.Lock()  # the reads of stores that must not overlap, one at a time
_process = uuid.uuid4().hex


def process_token() -> str:
    """This process, told from every other: process ids repeat across hosts and containers."""
    return _process


def _new_process() -> None:
    global _process
    _process = uuid.uuid4().hex


os.register_at_fork(after_in_child=_new_process)


@dataclass(frozen=True)
class _Failed:
    """A key whose ``get`` raised, kept so that the first failure is reported with its key."""

    key: str
    error: Exception


@dataclass(frozen=True, eq=False)
class KeyStore(Store):
    """Any zarr-python store, read through its own async ``get`` (whole chunks, and shard indexes with
    the object's ``getsize``) and ``get_partial_values`` (inner chunks of shards), many requests in
    flight on zarr's event loop (``async.concurrency`` of zarr's config at a time). A chunk is absent
    exactly when the store's ``get`` returns nothing, as zarr-python reads it.

    Attributes
    ----------
    store
        The zarr-python store. It travels with the tasks as zarr pickles it.
    root
        How messages name the store: its type and ``str``.
    home
        For a store whose data lives in its process's memory (``resolve.process_bound``): the
        ``process_token`` of the process where it was opened; a task elsewhere refuses it rather than
        read a copy or an empty store.
    serial
        Its reads must not overlap (``resolve.serial``: fsspec's archive filesystems read one shared
        file, and concurrent reads garble each other): one request at a time in the process.
    key
        Tells this zarr store object from every other (``resolve.key_store``): the names of two
        arrays of equal metadata in two stores must differ, whatever their ``root`` says.
    """

    store: Any
    root: str = ""
    home: str | None = None
    serial: bool = False
    key: str = ""

    def path(self, key: str) -> str:
        return key

    def location(self, key: str) -> str:
        return f"{self.root}/{key}" if key else self.root

    @property
    def identity(self) -> str:
        return self.key

    def check_home(self, elsewhere: bool = False) -> None:
        """Raises ``StoreError`` in a process other than the one whose memory holds the store (or, with
        ``elsewhere``, for any such store: its reads are bound for other processes)."""
        if self.home is not None and (elsewhere or self.home != process_token()):
            raise StoreError(
                self.root,
                "",
                "its data lives in the memory of the process that opened it and cannot be read by dask "
                "workers in other processes: read it with dask's threaded scheduler or a cluster of "
                "threads (LocalCluster(processes=False)), or write it to a store on disk or in object "
                "storage",
            )

    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        return [Range(p, 0, -1, Source.KEY) for p in paths]

    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        self.check_home()

        async def both() -> tuple[Any, Any]:
            proto = default_buffer_prototype()
            try:
                got = await self.store.get(path, proto, byte_range=request)
                size = None if got is None else await self.store.getsize(path)
            except FileNotFoundError:  # gone between the two requests
                return None, None
            except Exception as e:  # a store whose ranged reads or getsize fail: the whole object
                if transient(e):
                    raise
                whole = await self.store.get(path, proto)
                if whole is None:
                    return None, None
                start, end = _bounds(request, len(whole))
                return whole[start:end], len(whole)
            return got, size

        got, size = self._run(path, both)
        return None if got is None else (int(size), got.to_bytes())

    def parts(self, path: str, spans: Sequence[tuple[int, int]]) -> list[Range]:
        return [Range(path, offset, size, Source.KEY) for offset, size in spans]

    def fetch(self, ranges: Sequence[Range]) -> list[Blob | None]:
        self.check_home()
        whole = [i for i, r in enumerate(ranges) if r.size < 0]
        parts = [i for i, r in enumerate(ranges) if r.size >= 0]
        limit = 1 if self.serial else max(int(zarr.config.get("async.concurrency") or 1), 1)
        requests = [
            (ranges[i].path, RangeByteRequest(ranges[i].offset, ranges[i].offset + ranges[i].size))
            for i in parts
        ]

        async def everything() -> list[Any]:
            proto = default_buffer_prototype()
            gate = asyncio.Semaphore(limit)

            async def one(key: str, request: ByteRequest | None = None) -> Any:
                async with gate:
                    try:
                        return await self.store.get(key, proto, byte_range=request)
                    except Exception as e:  # kept with its key; the first is raised below
                        return _Failed(key, e)

            async def ranged() -> list[Any]:
                if not requests or self.serial:  # one at a time: one request after another
                    return list(await asyncio.gather(*(one(k, r) for k, r in requests)))
                try:
                    return list(await self.store.get_partial_values(proto, requests))
                except Exception as e:
                    return [_Failed(requests[0][0], e)] * len(requests)

            got = await asyncio.gather(ranged(), *(one(ranges[i].path) for i in whole))
            return [*got[0], *got[1:]]

        got = self._run(ranges[0].path if ranges else "", everything)
        out: list[Blob | None] = [None] * len(ranges)
        for i, buf in zip([*parts, *whole], got, strict=True):
            r = ranges[i]
            if buf is None and r.size >= 0:
                raise StoreError(
                    self.root, r.path, f"the object vanished: no bytes at [{r.offset}, {r.offset + r.size})"
                )
            data = None if buf is None else buf.as_numpy_array()  # a view of the store's bytes
            if data is not None and r.size >= 0 and len(data) != r.size:
                raise StoreError(
                    self.root, r.path, f"short read: {len(data)} of {r.size} bytes at {r.offset}"
                )
            out[i] = data
        return out

    def _run(self, what: str, make: Callable[[], Any]) -> Any:
        """``make()``'s coroutine run on zarr's event loop; a transient failure retried, any other
        raised as ``StoreError`` naming the store and the key (a missing object stays
        FileNotFoundError)."""

        def attempt() -> Any:
            with _serial if self.serial else contextlib.nullcontext():
                got = sync(make())
            for item in got if isinstance(got, list) else ():
                if isinstance(item, _Failed):
                    raise _as_error(self.root, item.key, item.error)
            return got

        def classified() -> Any:
            try:
                return attempt()
            except (OSError, StoreError):
                raise
            except Exception as e:
                raise _as_error(self.root, what, e) from e

        return retrying(self.root, classified)

    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        return DeviceReader.HOST


def _as_error(store: str, key: str, error: Exception) -> Exception:
    """A store's failure as this package raises it: OSError for what a retry may cure (and a missing
    object), ``StoreError`` naming the store and the key for anything else."""
    if isinstance(error, FileNotFoundError) or transient(error):
        return error if isinstance(error, OSError) else OSError(errno.EIO, f"{type(error).__name__}: {error}")
    return StoreError(store, key, f"the store's read failed: {type(error).__name__}: {error}")


class LocatedStore(Store):
    """A zarr store that can say where each key's bytes lie (kerchunk references, Icechunk's chunk
    manifests): a range of a local file, read directly; else the key, read through the store's
    ``get``. Whether a key exists is the store's answer, never whether a file is found.

    Attributes
    ----------
    keys
        The zarr store, for the keys it does not place in local files.
    """

    keys: KeyStore

    @property
    def root(self) -> str:  # type: ignore[override]
        return self.keys.root

    @property
    def identity(self) -> str:
        return self.keys.identity

    @abstractmethod
    def locate(self, keys: Sequence[str]) -> list[Range | None]:
        """Each key's bytes: a ``Source.FILE`` range, a ``Source.KEY`` range of the whole key, or None
        where the store holds no such key."""

    def path(self, key: str) -> str:
        return key

    def location(self, key: str) -> str:
        return self.keys.location(key)

    def whole(self, paths: Sequence[str]) -> list[Range | None]:
        return self.locate(paths)

    def read_range(self, path: str, request: ByteRequest) -> tuple[int, bytes] | None:
        (where,) = self.locate([path])
        if where is None:
            return None
        if where.source is Source.FILE:
            return read_file_range(where.path, request, where.offset, where.size)
        return self.keys.read_range(path, request)

    def checked(self, keys: Sequence[str], ranges: list[Range | None]) -> list[Range | None]:
        """``ranges`` (of ``keys``), each file range inside its file: the files stated in one native
        batch, a range that is negative or reaches past its file's end (a damaged reference or
        manifest) or a file that is not there raises ``StoreError``, before anything is allocated
        for it."""
        files = sorted({r.path for r in ranges if r is not None and r.source is Source.FILE})
        if not files:
            return ranges
        sizes = np.empty(len(files), dtype=np.int64)
        errors = np.zeros(len(files), dtype=np.int32)
        _preads.sizes(files, sizes, errors, native_threads(len(files)))
        size_of = dict(zip(files, sizes.tolist(), strict=True))
        for key, r in zip(keys, ranges, strict=True):
            if r is None or r.source is not Source.FILE:
                continue
            have = size_of[r.path]
            if have < 0:
                raise StoreError(self.root, key, f"the store places it in {r.path!r}, which is not there")
            if r.offset < 0 or r.size < 0 or r.offset + r.size > have:
                raise StoreError(
                    self.root,
                    key,
                    f"the store places it at [{r.offset}, {r.offset + r.size}) of {r.path!r}, a file of "
                    f"{have} bytes",
                )
        return ranges

    def parts(self, path: str, spans: Sequence[tuple[int, int]]) -> list[Range]:
        (where,) = self.locate([path])
        if where is None or where.source is not Source.FILE:
            return self.keys.parts(path, spans)
        for offset, size in spans:
            if offset + size > where.size:
                raise StoreError(
                    self.root, path, f"[{offset}, {offset + size}) lies past its {where.size} bytes"
                )
        return [Range(where.path, where.offset + offset, size) for offset, size in spans]

    @property
    def fetcher(self) -> KeyStore:
        return self.keys

    def fetch(self, ranges: Sequence[Range]) -> list[Blob | None]:
        return self.keys.fetch(ranges)

    def device_reader(self, remote_file_available: Callable[[], bool]) -> DeviceReader:
        return DeviceReader.CUFILE
