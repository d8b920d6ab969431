"""Remote stores: an HTTP server with Range support and an S3-compatible server, both on loopback."""

import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

from zarr_dask_gpu import ChunkDecodeError, MetadataError, from_zarr_gpu

from ..helpers import host, sample

pytest.importorskip("aiohttp")


class _RangeHandler(SimpleHTTPRequestHandler):
    """Static files with HTTP Range requests; fails the first ``failures`` chunk requests with 503."""

    failures: ClassVar[int] = 0
    meta_failures: ClassVar[int] = 0  # the first GETs of metadata documents that answer 503
    ignore_ranges: ClassVar[bool] = False  # answer every GET with the whole file, as some servers do
    requests: ClassVar[list[str]] = []
    agents: ClassVar[list[str]] = []  # each GET's User-Agent: who made the request

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.requests.append(self.path)
        self.agents.append(self.headers.get("User-Agent", ""))
        if self.path.endswith((".json", ".zarray", ".zattrs", ".zgroup")) and _RangeHandler.meta_failures > 0:
            _RangeHandler.meta_failures -= 1
            self.send_error(503, "try again")
            return
        if "/c/" in self.path and _RangeHandler.failures > 0:
            _RangeHandler.failures -= 1
            self.send_error(503, "try again")
            return
        path = self.translate_path(self.path)
        if not os.path.isfile(path):
            self.send_error(404)
            return
        data = open(path, "rb").read()  # noqa: SIM115
        m = re.match(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        if m and not _RangeHandler.ignore_ranges:
            a, b = m.groups()
            start = len(data) - int(b) if a == "" else int(a)
            end = len(data) - 1 if (a == "" or b == "") else int(b)
            body = data[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{start + len(body) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def http_root(tmp_path):
    handler = lambda *a, **k: _RangeHandler(*a, directory=str(tmp_path), **k)  # noqa: E731
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _RangeHandler.failures = 0
    _RangeHandler.meta_failures = 0
    _RangeHandler.ignore_ranges = False
    _RangeHandler.requests = []
    _RangeHandler.agents = []
    try:
        yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_http_parity_with_local(http_root, device):
    root, url = http_root
    a = zarr.create_array(root / "a.zarr", shape=(60, 33), chunks=(8, 16), dtype="f8", fill_value=np.nan)
    a[:40] = sample((40, 33), "f8")
    x = from_zarr_gpu(f"{url}/a.zarr", chunks=(20, 33), device=device)
    np.testing.assert_array_equal(host(x.compute()), a[...])  # missing chunks read as the fill value


@pytest.mark.gpu
@pytest.mark.parametrize("io", ["kvikio", "fsspec"])
@pytest.mark.parametrize("sharded", [False, True])
def test_gpu_reads_remote_chunks_with_kvikio_or_fsspec(http_root, io, sharded):
    """remote-io="kvikio": the chunk bytes travel by kvikio.RemoteFile (libcurl, no aiohttp
    User-Agent), straight into device memory; "fsspec": by aiohttp on the host. Values alike."""
    import dask
    import kvikio

    if io == "kvikio" and not kvikio.is_remote_file_available():
        pytest.skip("this kvikio has no remote-file support")
    root, url = http_root
    serializer = ShardingCodec(chunk_shape=(4, 8), codecs=[BytesCodec(), ZstdCodec(level=1)])
    a = zarr.create_array(
        root / "a.zarr",
        shape=(40, 32),
        chunks=(16, 16) if sharded else (8, 16),
        dtype="f4",
        fill_value=np.nan,
        **(dict(serializer=serializer, compressors=None, filters=None) if sharded else {}),
    )
    a[:24] = sample((24, 32), "f4")  # later chunks (or inner chunks) missing: read as the fill value
    with dask.config.set({"zarr_dask_gpu.remote-io": io}):
        x = from_zarr_gpu(f"{url}/a.zarr", chunks=(16, 32), device="gpu")
        np.testing.assert_array_equal(host(x.compute()), a[...])
    chunk_gets = [  # GETs of chunk objects that exist (fsspec sizes missing ones: HEAD, then GET)
        g
        for p, g in zip(_RangeHandler.requests, _RangeHandler.agents, strict=True)
        if "/c/" in p and (root / p.lstrip("/")).is_file()
    ]
    assert chunk_gets
    by_aiohttp = ["aiohttp" in g.lower() for g in chunk_gets]
    if io == "fsspec":
        assert all(by_aiohttp)
    elif sharded:  # the shard indexes are read on the host (fsspec), the inner chunks by kvikio
        assert not all(by_aiohttp)
    else:
        assert not any(by_aiohttp), chunk_gets


def test_http_sharded_reads_ranges(http_root, device):
    root, url = http_root
    codec = ShardingCodec(chunk_shape=(4, 8), codecs=[BytesCodec(), ZstdCodec(level=1)])
    a = zarr.create_array(
        root / "s.zarr",
        shape=(32, 32),
        chunks=(16, 16),
        dtype="i4",
        serializer=codec,
        compressors=None,
        filters=None,
    )
    a[...] = sample(a.shape, "i4")
    x = from_zarr_gpu(f"{url}/s.zarr", device=device)
    np.testing.assert_array_equal(host(x[5:9, 3:12].compute()), a[5:9, 3:12])
    np.testing.assert_array_equal(host(x.compute()), a[...])


def test_a_server_ignoring_range_requests_is_named(http_root):
    """A server that answers a byte range with the whole file: the error says so."""
    root, url = http_root
    codec = ShardingCodec(chunk_shape=(4, 8), codecs=[BytesCodec(), ZstdCodec(level=1)])
    a = zarr.create_array(
        root / "s.zarr", shape=(32, 32), chunks=(16, 16), dtype="i4", serializer=codec, compressors=None
    )
    a[...] = sample(a.shape, "i4")
    _RangeHandler.ignore_ranges = True
    x = from_zarr_gpu(f"{url}/s.zarr", device="cpu")
    with pytest.raises(ChunkDecodeError, match=r"ignores byte-range \(HTTP Range\) requests"):
        x.compute(scheduler="sync")


def test_http_transient_errors_are_retried(http_root, device):
    root, url = http_root
    a = zarr.create_array(root / "a.zarr", shape=(16,), chunks=(4,), dtype="i2")
    a[...] = np.arange(16)
    x = from_zarr_gpu(f"{url}/a.zarr", device=device)
    _RangeHandler.failures = 2  # the first two chunk GETs answer 503 (kvikio's or aiohttp's)
    import dask

    with dask.config.set({"zarr_dask_gpu.io-retry-delay": 0.001}):
        np.testing.assert_array_equal(host(x.compute(scheduler="sync")), np.arange(16))
    assert sum("/c/" in r for r in _RangeHandler.requests) >= 6  # 2 failed tries, then 4 chunks


def test_http_metadata_reads_are_retried(http_root):
    root, url = http_root
    a = zarr.create_array(root / "a.zarr", shape=(16,), chunks=(4,), dtype="i2")
    a[...] = np.arange(16)
    _RangeHandler.meta_failures = 2  # one 503 answer to zarr.json, as a busy server gives
    import dask

    with dask.config.set({"zarr_dask_gpu.io-retry-delay": 0.001}):
        x = from_zarr_gpu(f"{url}/a.zarr", device="cpu")
    np.testing.assert_array_equal(x.compute(scheduler="sync"), np.arange(16))
    assert _RangeHandler.meta_failures == 0


def test_http_missing_metadata_names_the_url(http_root):
    _, url = http_root
    with pytest.raises(MetadataError, match=re.escape(f"{url}/nothing.zarr")):
        from_zarr_gpu(f"{url}/nothing.zarr", device="cpu")


@pytest.fixture
def s3(monkeypatch):
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host_, port = server.get_host_and_port()
        for k, v in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }.items():
            monkeypatch.setenv(k, v)
        options = {"endpoint_url": f"http://{host_}:{port}"}
        import s3fs

        fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": options["endpoint_url"]})
        fs.mkdir("bucket")
        yield fs, {"client_kwargs": {"endpoint_url": options["endpoint_url"]}}
    finally:
        server.stop()


def test_s3_parity_with_local(tmp_path, s3, device):
    fs, options = s3
    a = zarr.create_array(tmp_path / "a.zarr", shape=(30, 20), chunks=(7, 10), dtype="u2", fill_value=7)
    a[:20] = sample((20, 20), "u2")
    fs.put(str(tmp_path / "a.zarr"), "bucket/a.zarr", recursive=True)
    x = from_zarr_gpu("s3://bucket/a.zarr", chunks=(14, 20), device=device, storage_options=options)
    np.testing.assert_array_equal(host(x.compute()), a[...])


def test_xarray_over_http(http_root, device):
    xr = pytest.importorskip("xarray")
    import zarr_dask_gpu

    root, url = http_root
    ds = xr.Dataset({"t": (("time", "x"), sample((6, 5), "f4"))}, coords={"x": np.arange(5)})
    ds.to_zarr(root / "d.zarr", mode="w")
    got = zarr_dask_gpu.open_dataset(f"{url}/d.zarr", device=device)
    np.testing.assert_array_equal(host(got.t.data.compute()), ds.t.values)


def test_engine_over_http(http_root, device):
    xr = pytest.importorskip("xarray")

    root, url = http_root
    ds = xr.Dataset({"t": (("x",), np.arange(7.0))})
    ds.to_zarr(root / "e.zarr", mode="w")
    got = xr.open_dataset(f"{url}/e.zarr", engine="zarr_gpu", device=device, storage_options={})
    np.testing.assert_array_equal(host(got.t.data.compute()), ds.t.values)
