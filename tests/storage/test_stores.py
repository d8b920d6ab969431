"""The store contract: local files, fsspec URLs and a zarr store read through its own ``get`` give the
same paths, index reads and host reads; the zarr store object chooses which."""

import dataclasses
import os
import pickle

import dask
import fsspec
import numpy as np
import pytest
import zarr
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

from zarr_dask_gpu.resolve import key_store, open_array_info
from zarr_dask_gpu.storage.readers import host_reader
from zarr_dask_gpu.storage.stores import FsspecStore, KeyStore, LocalStore, process_token
from zarr_dask_gpu.storage.units import locate, read_shard_index

from .test_remote import http_root  # noqa: F401  # the HTTP server with Range support

pytest.importorskip("aiohttp")


def _arrays(root):
    data = np.arange(40 * 30, dtype="i4").reshape(40, 30)
    plain = zarr.create_array(f"{root}/g/plain", shape=data.shape, chunks=(8, 10), dtype="i4", zarr_format=3)
    plain[:] = data
    sharding = ShardingCodec(
        chunk_shape=(4, 10), codecs=[BytesCodec(), ZstdCodec()], index_codecs=[BytesCodec(), Crc32cCodec()]
    )
    sharded = zarr.create_array(
        f"{root}/g/sharded",
        shape=data.shape,
        chunks=(16, 30),
        dtype="i4",
        serializer=sharding,
        compressors=None,
        zarr_format=3,
    )
    sharded[:32] = data[:32]  # the last shard is never written: a missing shard


@pytest.fixture
def stores(tmp_path, http_root):  # noqa: F811
    root, url = http_root
    _arrays(root)
    local = open_array_info(root, "g/sharded")
    by_keys = dataclasses.replace(local, store=key_store(zarr.storage.LocalStore(root, read_only=True)))
    over_http = open_array_info(url, "g/sharded")
    return local, by_keys, over_http


def test_the_store_is_chosen_by_the_zarr_store(tmp_path, http_root):  # noqa: F811
    root, url = http_root
    _arrays(root)
    plain = f"{root}/g/plain"

    def chosen(store, **kw):
        return open_array_info(store, **kw).store

    assert chosen(plain) == LocalStore(plain)
    assert chosen(str(root), component="g/plain") == LocalStore(str(root))
    assert chosen(f"file://{plain}") == LocalStore(plain)
    assert chosen(fsspec.get_mapper(plain)) == LocalStore(plain)
    assert chosen(zarr.storage.FsspecStore.from_url(f"file://{plain}")) == LocalStore(plain)
    assert chosen(f"{url}/g/plain") == FsspecStore(f"{url}/g/plain", {})
    assert chosen(zarr.storage.FsspecStore.from_url(url, read_only=True), component="g/plain") == FsspecStore(
        url, {}
    )
    memory = zarr.storage.MemoryStore()
    zarr.create_array(memory, shape=(4,), dtype="i2")
    found = chosen(memory)
    assert isinstance(found, KeyStore) and found.store._store_dict is memory._store_dict
    assert found.home == process_token()
    assert found.location("c/0") == f"MemoryStore({str(memory)!r})/c/0"
    zipped = chosen(f"simplecache::file://{plain}")
    assert isinstance(zipped, KeyStore) and zipped.home is None


def test_paths_keys_and_locations(stores, tmp_path):
    local, by_keys, over_http = stores
    assert isinstance(local.store, LocalStore) and local.store.storage_options is None
    assert isinstance(over_http.store, FsspecStore) and over_http.store.storage_options == {}
    assert local.location == os.path.join(str(tmp_path), "g", "sharded")
    assert over_http.location == f"{over_http.store.root}/g/sharded"
    assert by_keys.location == f"LocalStore('file://{tmp_path}')/g/sharded"
    assert local.store.path("") == str(tmp_path)
    for info in stores:
        assert info.chunk_path((5, 0)) == info.store.path("g/sharded/c/1/0")


def test_range_reads_give_the_same_bytes(stores):
    local = stores[0]
    path = "g/sharded/c/0/0"
    size = os.path.getsize(local.store.path(path))
    raw = open(local.store.path(path), "rb").read()  # noqa: SIM115
    for info in stores:
        store = info.store
        assert store.read_range(store.path(path), SuffixByteRequest(20)) == (size, raw[-20:])
        assert store.read_range(store.path(path), RangeByteRequest(3, 11)) == (size, raw[3:11])
        assert store.read_range(store.path(path), RangeByteRequest(0, size + 50)) == (size, raw)
        assert store.read_range(store.path(path), OffsetByteRequest(size - 5)) == (size, raw[-5:])
        assert store.read_range(store.path("g/sharded/c/2/0"), SuffixByteRequest(20)) is None  # no shard
    http = stores[2].store
    assert http.size(http.path(path)) == size and http.size(http.path("g/sharded/c/2/0")) is None


def test_shard_indexes_and_host_reads_give_the_same_bytes(stores):
    local, *remote = stores
    coords = [(i, 0) for i in range(10)]
    want = host_reader(local).read(locate(local, coords))
    _, entries = read_shard_index(local, (0, 0))
    assert read_shard_index(local, (8, 0)) is None
    for info in remote:
        _, got_entries = read_shard_index(info, (0, 0))
        np.testing.assert_array_equal(got_entries, entries)
        assert read_shard_index(info, (8, 0)) is None
        ranges = locate(info, coords)
        assert [r is None for r in ranges] == [r is None for r in locate(local, coords)]
        got = host_reader(info).read(ranges)
        np.testing.assert_array_equal(got.sizes, want.sizes)
        for i in range(len(coords)):
            a, b, n = got.offsets[i], want.offsets[i], want.sizes[i]
            assert (a < 0) == (b < 0)
            np.testing.assert_array_equal(got.buffer[a : a + n], want.buffer[b : b + n])


def test_unsharded_chunks_are_located_whole(tmp_path, http_root):  # noqa: F811
    root, url = http_root
    _arrays(root)
    local, over_http = open_array_info(root, "g/plain"), open_array_info(url, "g/plain")
    os.remove(local.chunk_path((1, 1)))
    coords = [(0, 0), (1, 1)]
    sizes = [r.size if r else None for r in locate(local, coords)]
    assert sizes[0] == os.path.getsize(local.chunk_path((0, 0))) and sizes[1] is None
    assert [r.size for r in locate(over_http, coords)] == [-1, -1]  # found by reading
    want, got = (
        host_reader(local).read(locate(local, coords)),
        host_reader(over_http).read(locate(over_http, coords)),
    )
    np.testing.assert_array_equal(got.sizes, want.sizes)
    np.testing.assert_array_equal(got.offsets < 0, want.offsets < 0)
    np.testing.assert_array_equal(got.buffer[: want.sizes[0]], want.buffer[: want.sizes[0]])


def test_the_store_names_the_device_reader(stores):
    local, by_keys, over_http = stores
    assert local.store.device_reader(lambda: pytest.fail("asked kvikio for local files")) == "cufile"
    assert over_http.store.device_reader(lambda: True) == "kvikio"
    assert over_http.store.device_reader(lambda: False) == "host"
    assert by_keys.store.device_reader(lambda: True) == "host"  # the zarr store's own get
    with dask.config.set({"zarr_dask_gpu.remote-io": "fsspec"}):
        assert over_http.store.device_reader(lambda: True) == "host"
    with dask.config.set({"zarr_dask_gpu.remote-io": "kvikio"}):
        assert over_http.store.device_reader(lambda: True) == "kvikio"
        with pytest.raises(ValueError, match="lacks remote support"):
            over_http.store.device_reader(lambda: False)


def test_infos_pickle_small_with_stable_tokens(stores, tmp_path):
    local, by_keys, over_http = stores
    again = pickle.loads(pickle.dumps(by_keys))  # the zarr store travels with it, as zarr pickles it
    assert again.store.store == by_keys.store.store and again.token == by_keys.token
    for info in (local, over_http):
        if isinstance(info.store, FsspecStore):
            info.store.fs  # noqa: B018  # a filesystem made in this process is not carried
        again = pickle.loads(pickle.dumps(info))
        assert again.store == info.store and again.token == info.token
        assert len(pickle.dumps(info.store)) < 200  # its root and options, never a filesystem
    assert open_array_info(str(tmp_path), "g/sharded").token == local.token
    assert open_array_info(str(tmp_path), "g/plain").token != local.token
    assert over_http.token != local.token
