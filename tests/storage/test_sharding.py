"""Sharded zarr v3: inner chunks read as byte ranges from verified shard indexes."""

import contextlib
from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, TransposeCodec, ZstdCodec

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.storage.units import Range, coalesce, locate, read_shard_index

from ..helpers import host, sample

INNER = {
    "none": [BytesCodec()],
    "zstd": [BytesCodec(), ZstdCodec(level=1)],
    "gzip": [BytesCodec(), GzipCodec(level=1)],
    "transpose-zstd": [TransposeCodec(order=(1, 0)), BytesCodec(endian="big"), ZstdCodec(level=1)],
    "crc32c": [BytesCodec(), ZstdCodec(level=1), Crc32cCodec()],  # inner chain decoded on the CPU
}


def _sharded(path, inner="zstd", index_location="end", index_codecs=None, shape=(45, 38), dtype="f4"):
    codec = ShardingCodec(
        chunk_shape=(5, 4),
        codecs=INNER[inner],
        index_codecs=index_codecs or [BytesCodec(), Crc32cCodec()],
        index_location=index_location,
    )
    a = zarr.create_array(
        path,
        shape=shape,
        chunks=(20, 16),
        dtype=dtype,
        serializer=codec,
        compressors=None,
        filters=None,
        fill_value=-1,
    )
    return a


@pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")
@pytest.mark.parametrize("inner", list(INNER))
@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("checksum", [True, False])
def test_parity_with_zarr(tmp_path, device, inner, index_location, checksum):
    index = [BytesCodec(), Crc32cCodec()] if checksum else [BytesCodec()]
    a = _sharded(tmp_path / "a.zarr", inner, index_location, index)
    ref = sample(a.shape, "f4")
    a[:] = ref
    a[7:12, 9:30] = -1  # some inner chunks all fill: written as empty entries
    info = open_array_info(tmp_path / "a.zarr")
    assert info.chunks == (5, 4) and info.grid == (20, 16)
    for chunks in (None, (13, 7), (45, 38)):
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=chunks, device=device)
        np.testing.assert_array_equal(host(x.compute()), a[...])
    assert from_zarr_gpu(tmp_path / "a.zarr", device=device, chunks="256MiB").chunks == (
        (45,),
        (38,),
    )  # whole shards


def test_partial_shards_and_overhanging_edges(tmp_path, device):
    a = _sharded(tmp_path / "a.zarr", shape=(50, 41))
    a[41:, 33:] = sample((9, 8), "f4")  # one shard partly written, at the ragged corner
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(17, 9), device=device)
    np.testing.assert_array_equal(host(x.compute()), a[...])


def test_sharding_inside_sharding(tmp_path, device):
    inner = ShardingCodec(chunk_shape=(5, 2), codecs=[BytesCodec(), ZstdCodec(level=1)])
    outer = ShardingCodec(chunk_shape=(10, 8), codecs=[inner])
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(40, 32),
        chunks=(20, 16),
        dtype="i4",
        serializer=outer,
        compressors=None,
        filters=None,
    )
    a[...] = sample(a.shape, "i4")
    with pytest.warns(Warning) if device == "gpu" else contextlib.nullcontext():
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(15, 32), device=device)
    np.testing.assert_array_equal(host(x.compute()), a[...])


def test_a_block_reads_only_its_inner_chunks(tmp_path, device):
    a = _sharded(tmp_path / "a.zarr")
    ref = sample(a.shape, "f4")
    a[...] = ref
    info = open_array_info(tmp_path / "a.zarr")
    # overwrite every inner chunk of shard c/0/0 but (1, 1) (rows 5-9, cols 4-7) with garbage
    path, entries = read_shard_index(info, (0, 0))
    data = bytearray(Path(path).read_bytes())
    for i in range(4):
        for j in range(4):
            if (i, j) != (1, 1):
                off, n = (int(v) for v in entries[i, j])
                data[off : off + n] = b"\xff" * n
    Path(path).write_bytes(bytes(data))
    x = from_zarr_gpu(tmp_path / "a.zarr", device=device)
    np.testing.assert_array_equal(host(x[5:10, 4:8].compute()), ref[5:10, 4:8])
    np.testing.assert_array_equal(host(x[6:8, 5].compute()), ref[6:8, 5])
    with pytest.raises(ChunkDecodeError, match=r"inner chunk \(0, 0\)"):
        x[:5, :4].compute()


def test_a_block_covering_a_shard_reads_it_in_one_pread(tmp_path):
    a = _sharded(tmp_path / "a.zarr")
    a[...] = sample(a.shape, "f4")
    info = open_array_info(tmp_path / "a.zarr")
    coords = [(i, j) for i in range(4) for j in range(4)]  # the 16 inner chunks of shard c/0/0
    reads = coalesce(locate(info, coords))
    assert len(reads) == 1 and len(reads[0].members) == 16


def test_coalesce_limits():
    rs = [
        Range("f", 0, 10),
        Range("f", 10, 10),
        Range("f", 40, 10),
        None,
        Range("g", 20, 5),
        Range("f", 25, 5),
    ]
    reads = coalesce(rs, gap=5, limit=100)
    assert [(r.path, r.offset, r.size) for r in reads] == [("f", 0, 30), ("f", 40, 10), ("g", 20, 5)]
    assert dict(reads[0].members) == {0: 0, 1: 10, 5: 25}
    assert [(r.offset, r.size) for r in coalesce(rs[:3], gap=20, limit=100)] == [(0, 50)]
    assert [(r.offset, r.size) for r in coalesce(rs[:3], gap=20, limit=25)] == [(0, 20), (40, 10)]
    assert coalesce([None, None]) == []


def _edit_index(info, shard, edit, fix_crc=True):
    import google_crc32c

    path = Path(info.chunk_path(shard))
    data = bytearray(path.read_bytes())
    n = 16 * int(np.prod(info.per_shard))
    idx = np.frombuffer(bytes(data[-n - 4 : -4]), "<u8").reshape(*info.per_shard, 2).copy()
    edit(idx)
    data[-n - 4 : -4] = idx.tobytes()
    if fix_crc:
        data[-4:] = google_crc32c.value(bytes(data[-n - 4 : -4])).to_bytes(4, "little")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage,message",
    [
        ("index-too-short", "shard index truncated"),
        ("entry-out-of-range", r"inner chunk \(2, 3\): index entry"),
        ("entry-overflows", r"inner chunk \(0, 1\): index entry"),
        ("bad-checksum", "checksum"),
        ("truncated-file", "checksum|truncated"),
        ("garbage-inner-chunk", r"inner chunk \(1, 2\)"),
    ],
)
def test_damaged_shards_raise_naming_shard_and_inner_chunk(tmp_path, device, damage, message):
    a = _sharded(tmp_path / "a.zarr")
    a[...] = sample(a.shape, "f4")
    info = open_array_info(tmp_path / "a.zarr")
    path = tmp_path / "a.zarr" / "c" / "1" / "0"
    if damage == "index-too-short":
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "entry-out-of-range":
        _edit_index(info, (4, 0), lambda idx: idx.__setitem__((2, 3, 0), 10**9))
    elif damage == "entry-overflows":
        _edit_index(info, (4, 0), lambda idx: idx.__setitem__((0, 1), (2**64 - 8, 64)))
    elif damage == "bad-checksum":
        _edit_index(info, (4, 0), lambda idx: idx.__setitem__((0, 0, 1), idx[0, 0, 1] - 1), fix_crc=False)
    elif damage == "truncated-file":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        _, entries = read_shard_index(info, (4, 0))
        off, n = (int(v) for v in entries[1, 2])
        data = bytearray(path.read_bytes())
        data[off : off + n] = np.random.default_rng(0).integers(0, 256, n, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError, match=message) as e:
        from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()
    assert e.value.key == "c/1/0"
    np.testing.assert_array_equal(
        host(from_zarr_gpu(tmp_path / "a.zarr", device=device)[:20].compute()), a[:20]
    )
