"""The host's guard on a stored chunk's outermost stage: the size each chain's compressor decodes to,
header claims refused before zarr-python allocates them, and streams that state no size decoded
with a bound."""

import bz2
import gzip
import lzma
import tracemalloc
import zlib

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.codecs.numcodecs as ncv3
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu
from zarr_dask_gpu.codecs import reference
from zarr_dask_gpu.codecs.stored import open_stored, outer_stage
from zarr_dask_gpu.resolve import open_array_info

from ..codecs.test_damage import Unsized
from ..damage import put, window_byte, zstd_header
from ..helpers import host, sample

N = 1024  # elements per chunk
pytestmark = pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")


def _v2(**kw):
    return dict(zarr_format=2, **kw)


def _v3(*codecs, filters=()):
    return dict(zarr_format=3, filters=filters, compressors=codecs)


# (label, dtype, create_array arguments, (codec id, size, exact, crc32c) or None)
STAGES = [
    ("v2-zstd", "<f4", _v2(compressors=numcodecs.Zstd(level=1)), ("zstd", 4 * N, True, False)),
    (
        "v2-delta-astype",
        "<i4",
        _v2(filters=[numcodecs.Delta("<i4", astype="<i2")], compressors=numcodecs.Zstd(level=1)),
        ("zstd", 2 * N, True, False),
    ),
    (
        "v2-big-endian-delta",
        ">i4",
        _v2(filters=[numcodecs.Delta(">i4")], compressors=numcodecs.Zstd(level=1)),
        ("zstd", 4 * N, True, False),
    ),
    (
        "v2-unknown-filter",
        "<u2",
        _v2(filters=[Unsized()], compressors=numcodecs.LZ4()),
        ("lz4", None, False, False),
    ),
    ("v2-raw", "<f8", _v2(compressors=None), (None, 8 * N, True, False)),
    ("v2-bz2", "<u1", _v2(compressors=numcodecs.BZ2(1)), ("bz2", N, True, False)),
    (  # HDF5's chain as kerchunk and VirtualiZarr write it: the compressor as the last filter
        "v2-shuffle-zlib-filters",
        "<f4",
        _v2(filters=[numcodecs.Shuffle(elementsize=4), numcodecs.Zlib(4)], compressors=None),
        ("zlib", 4 * N, True, False),
    ),
    (
        "v2-lzma-raw",
        "<u2",
        _v2(compressors=numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2}])),
        ("lzma", 2 * N, True, False),
    ),
    ("v3-zstd-crc32c", "<f4", _v3(ZstdCodec(level=1), Crc32cCodec()), ("zstd", 4 * N, True, True)),
    (
        "v3-astype-gzip",
        "<f8",
        _v3(GzipCodec(), filters=[ncv3.AsType(encode_dtype="<f4", decode_dtype="<f8")]),
        ("gzip", 4 * N, True, False),
    ),
    ("v3-blosclz", "<u4", _v3(BloscCodec(cname="blosclz")), ("blosc", 4 * N, True, False)),
    ("v3-zstd-then-shuffle", "<f4", _v3(ZstdCodec(level=1), ncv3.Shuffle(elementsize=1)), "none"),
    ("v3-two-compressors", "<f4", _v3(ZstdCodec(level=1), GzipCodec()), ("gzip", None, False, False)),
    ("v3-raw-crc32c", "<i2", _v3(Crc32cCodec()), (None, 2 * N, True, True)),
    ("v3-bz2", "<u1", _v3(ncv3.BZ2(level=1)), ("bz2", N, True, False)),
]


def _array(root, dtype, kw, fill=True):
    a = zarr.create_array(root / "a.zarr", shape=(4 * N,), chunks=(N,), dtype=dtype, fill_value=0, **kw)
    if fill:
        a[...] = sample(a.shape, dtype)
    return a


@pytest.mark.parametrize("label,dtype,kw,want", STAGES, ids=[s[0] for s in STAGES])
def test_outer_stage_is_the_compressor_and_the_size_it_decodes_to(tmp_path, label, dtype, kw, want):
    a = _array(tmp_path, dtype, kw)
    outer = outer_stage(open_array_info(tmp_path / "a.zarr"))
    if want == "none":  # stages after the compressor: the host cannot say what its bytes are
        assert outer is None
    else:
        codec, size, exact, crc = want
        assert (outer.codec, outer.exact, outer.crc32c) == (codec, exact, crc)
        logical = N * np.dtype(dtype).itemsize
        assert outer.size == (size if exact else 2 * logical + (1 << 16))
    # whatever the host can say, the read equals zarr-python's
    np.testing.assert_array_equal(host(from_zarr_gpu(tmp_path / "a.zarr", device="cpu").compute()), a[...])


def test_outer_stage_of_a_shard_is_its_inner_chain(tmp_path):
    sharding = ShardingCodec(chunk_shape=(256,), codecs=[BytesCodec(), ZstdCodec(level=1), Crc32cCodec()])
    a = zarr.create_array(
        tmp_path / "a.zarr", shape=(4 * N,), chunks=(N,), dtype="<u2", serializer=sharding, compressors=()
    )
    a[...] = sample(a.shape, "<u2")
    outer = outer_stage(open_array_info(tmp_path / "a.zarr"))
    assert (outer.codec, outer.size, outer.exact, outer.crc32c, outer.index) == ("zstd", 512, True, True, 1)


def _stored(tmp_path, kw, dtype="<u1", key="0"):
    _array(tmp_path, dtype, kw)
    return open_array_info(tmp_path / "a.zarr"), tmp_path / "a.zarr" / key


def _zstd_claims(data):
    # the frame's header rewritten to state 2**40 bytes, its blocks kept
    fhd = data[4]
    single, dict_bytes = fhd >> 5 & 1, (0, 1, 2, 4)[fhd & 3]
    end = 5 + (1 - single) + dict_bytes + (single, 2, 4, 8)[fhd >> 6]
    head = zstd_header(single=False, fcs=1 << 40, window=window_byte(20), checksum=bool(fhd & 4))
    return head + data[end:]


CLAIMS = {  # a header claiming far more than the chunk: refused before anything is allocated
    "zstd": (numcodecs.Zstd(level=1), _zstd_claims),
    "lz4": (numcodecs.LZ4(), lambda d: (2**31 - 1).to_bytes(4, "little") + d[4:]),
    "blosc": (numcodecs.Blosc("lz4"), lambda d: put(d, 4, (2**31 - 1).to_bytes(4, "little"))),
}


@pytest.mark.parametrize("unsized", [False, True], ids=["sized", "unsized-filter"])
@pytest.mark.parametrize("codec", list(CLAIMS))
def test_a_header_claiming_more_than_the_chunk_is_refused(tmp_path, codec, unsized):
    compressor, claim = CLAIMS[codec]
    _, path = _stored(tmp_path, _v2(filters=[Unsized()] if unsized else None, compressors=compressor))
    path.write_bytes(claim(path.read_bytes()))
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError) as e:
            from_zarr_gpu(tmp_path / "a.zarr", device="cpu").compute()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.key == "0"
    assert ("outside the chunk's bound" if unsized else "expected") in str(e.value)
    assert peak < 64 << 20


# streams of zeros a chunk's worth of metadata inflates to 256 MiB: 16 members or streams of 16 MiB
# each (zlib: one stream)
_ZEROS = bytes(16 << 20)
BOMBS = {
    "gzip": (numcodecs.GZip(1), lambda: gzip.compress(_ZEROS, 1) * 16),
    "zlib": (numcodecs.Zlib(1), lambda: zlib.compress(_ZEROS * 16, 1)),
    "bz2": (numcodecs.BZ2(1), lambda: bz2.compress(_ZEROS, 1) * 16),
    "lzma": (numcodecs.LZMA(), lambda: lzma.compress(_ZEROS, preset=0) * 16),
}


@pytest.fixture(scope="module")
def bombs():
    return {name: make() for name, (_, make) in BOMBS.items()}


@pytest.mark.parametrize("unsized", [False, True, "as-filter"], ids=["sized", "unsized-filter", "as-filter"])
@pytest.mark.parametrize("codec", list(BOMBS))
def test_a_stream_that_inflates_past_the_chunk_is_refused(tmp_path, device, bombs, codec, unsized):
    if unsized == "as-filter":  # the compressor written as the last filter (kerchunk's HDF5 chains)
        kw = _v2(filters=[BOMBS[codec][0]], compressors=None)
    else:
        kw = _v2(filters=[Unsized()] if unsized else None, compressors=BOMBS[codec][0])
    _, path = _stored(tmp_path, kw)
    path.write_bytes(bombs[codec])
    tracemalloc.start()
    try:
        with pytest.raises(ChunkDecodeError, match="decodes to more than") as e:
            from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert e.value.key == "0"
    assert peak < 64 << 20  # the bound, not the stream, decides what is allocated


def test_a_v3_stream_with_its_crc32c_is_checked_and_decoded(tmp_path, device):
    kw = _v3(GzipCodec(level=1), Crc32cCodec())
    a = _array(tmp_path, "<f4", kw)
    np.testing.assert_array_equal(host(from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()), a[...])
    path = tmp_path / "a.zarr" / "c" / "1"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(ChunkDecodeError, match="c/1") as e:
        from_zarr_gpu(tmp_path / "a.zarr", device=device).compute()
    assert "crc32c" in str(e.value)


STREAMS = {
    "bz2": numcodecs.BZ2(1),
    "xz": numcodecs.LZMA(),
    "lzma-raw": numcodecs.LZMA(format=lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA2, "preset": 1}]),
    "lzma-alone": numcodecs.LZMA(format=lzma.FORMAT_ALONE),
}


def _variants(data, rng):
    """Sound, truncated, padded, doubled and bit-flipped versions of a stored stream."""
    yield "sound", data
    for n in (1, 7, len(data) // 2):
        yield f"truncated-{n}", data[:-n]
    yield "zero-padded", data + bytes(8)
    yield "garbage-after", data + b"\x01\x02\x03garbage"
    yield "two-streams", data + data
    for _ in range(40):
        pos = int(rng.integers(len(data)))
        yield f"flip-{pos}", data[:pos] + bytes([data[pos] ^ (1 << int(rng.integers(8)))]) + data[pos + 1 :]


@pytest.mark.parametrize("name", list(STREAMS))
def test_bounded_streams_agree_with_numcodecs(name):
    """The bounded decode accepts what numcodecs accepts, with the same bytes, and refuses the rest."""
    codec = STREAMS[name]
    rng = np.random.default_rng(7)
    for size in (1, 1000, 70_000):
        raw = sample((size,), "u1", seed=size).tobytes()
        cfg = codec.get_config()
        at_most = reference.lzma_at_most if cfg["id"] == "lzma" else reference.bz2_at_most
        for label, data in _variants(codec.encode(raw), rng):
            try:
                want = bytes(codec.decode(data))
            except Exception:
                want = None
            try:
                got = at_most(data, size, cfg)
            except reference.ERRORS:
                got = None
            if want is not None and len(want) > size:  # two streams: twice the chunk, refused
                assert got is None, (size, label)
                continue
            assert got == want, (name, size, label)


def test_open_stored_names_empty_and_short_chunks(tmp_path):
    info, _ = _stored(tmp_path, _v3(GzipCodec(), Crc32cCodec()))
    outer = outer_stage(info)
    with pytest.raises(ValueError, match="empty"):
        open_stored(outer, memoryview(b""))
    with pytest.raises(ValueError, match="shorter than its crc32c"):
        open_stored(outer, memoryview(b"abc"))
