"""kvikio.RemoteFile range reads of remote chunks and shard ranges (HTTP(S), S3) into device memory."""

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import kvikio
import numpy as np

from ...metadata import ArrayInfo
from ...storage.readers import Staged, layout
from ...storage.retry import as_oserror, retrying
from ...storage.stores import DeviceReader, FsspecStore
from ...storage.units import Range
from .local import collect, in_flight

_SIZE_THREADS = 32  # concurrent size requests for objects of unknown size (network latency bound)


def device_reader(info: ArrayInfo) -> DeviceReader:
    """The device reader ``info``'s store names (``Store.device_reader``, after
    ``zarr_dask_gpu.remote-io``)."""
    return info.store.device_reader(kvikio.is_remote_file_available)


class KvikioRemoteReader:
    """Remote byte ranges straight into one device buffer, all in flight at once on kvikio's pool.

    Objects of unknown size (unsharded chunks) are sized first through the store's fsspec filesystem,
    where a missing object is a missing chunk; the bytes themselves travel by kvikio. S3 credentials,
    region and endpoint come from ``storage_options`` (s3fs's names) or the AWS environment variables.
    """

    def __init__(self, info: ArrayInfo) -> None:
        self._info = info

    def read(self, ranges: Sequence[Range | None], skip: int = 0, align: int = 1) -> Staged:
        plan = layout(self._sized(ranges), skip, align)
        buf = cp.empty(max(plan.total, 1), dtype=np.uint8)

        def all_reads() -> None:
            self._read(plan.reads, plan.starts, buf)

        if plan.reads:
            retrying(f"{len(plan.reads)} reads under {self._info.location}", as_oserror(all_reads))
        return Staged(buf, plan.offsets, plan.sizes)

    def _sized(self, ranges: Sequence[Range | None]) -> list[Range | None]:
        whole = [i for i, r in enumerate(ranges) if r is not None and r.size < 0]
        out = list(ranges)
        if not whole:
            return out
        store = self._info.store
        assert isinstance(store, FsspecStore), "kvikio reads the remote objects of an fsspec store"

        def size(i: int) -> int | None:
            return store.size(ranges[i].path)  # type: ignore[union-attr]

        with ThreadPoolExecutor(min(len(whole), _SIZE_THREADS)) as ex:
            for i, n in zip(whole, ex.map(size, whole), strict=True):
                out[i] = None if n is None else Range(ranges[i].path, 0, n)  # type: ignore[union-attr]
        return out

    def _read(self, reads: Sequence, starts: Sequence[int], buf: cp.ndarray) -> None:
        with in_flight() as (files, futures):
            for rd, start in zip(reads, starts, strict=True):
                files.append(self._open(rd.path, rd.offset + rd.size))
                futures.append(files[-1].pread(buf[start : start + rd.size], rd.size, rd.offset))
            collect(futures, reads)

    def _open(self, url: str, nbytes: int) -> kvikio.RemoteFile:
        if not url.startswith("s3://"):
            return kvikio.RemoteFile.open_http(url, nbytes)
        opts = self._info.store.storage_options or {}
        client = opts.get("client_kwargs") or {}
        return kvikio.RemoteFile.open_s3_url(
            url,
            nbytes,
            aws_region_name=client.get("region_name") or opts.get("region_name"),
            aws_access_key_id=opts.get("key"),
            aws_secret_access_key=opts.get("secret"),
            aws_endpoint_url=opts.get("endpoint_url") or client.get("endpoint_url"),
            aws_session_token=opts.get("token"),
        )
