"""Values equal zarr-python's CPU read across formats, dtypes, codec chains and layouts."""

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec
from zarr.codecs import numcodecs as nz3

from zarr_dask_gpu import from_zarr_gpu

from ..helpers import host, sample

DTYPES = ["bool", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", "c8", "c16"]
BIG = [">i2", ">u4", ">i8", ">f4", ">f8", ">c8", ">c16"]

V3_COMPRESSORS = {
    "none": [],
    "zstd": [ZstdCodec(level=1)],
    "zstd-checksum": [ZstdCodec(level=3, checksum=True)],
    "gzip": [GzipCodec(level=1)],
    "zlib": [nz3.Zlib(level=1)],
    "lz4": [nz3.LZ4()],
    "blosc": [BloscCodec(cname="lz4", shuffle="shuffle")],
    "crc32c": [ZstdCodec(level=1), Crc32cCodec()],
    "gzip-crc32c": [GzipCodec(level=1), Crc32cCodec()],  # checked on the host, beside the inflate
    "shuffle-zlib": [nz3.Shuffle(), nz3.Zlib(level=4)],  # netCDF4's chain
}
V2_COMPRESSORS = {
    "none": None,
    "zstd": numcodecs.Zstd(level=1),
    "gzip": numcodecs.GZip(level=1),
    "zlib": numcodecs.Zlib(level=1),
    "lz4": numcodecs.LZ4(),
    "blosc": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE),
}


def _check(path, device, chunks=None, component=None, **kw):
    ref = zarr.open_array(path, path=component or "", mode="r")[...]
    x = from_zarr_gpu(path, component, chunks=chunks, device=device, **kw)
    got = host(x.compute())
    assert got.shape == ref.shape
    assert got.dtype == ref.dtype.newbyteorder("=")
    np.testing.assert_array_equal(got, ref)
    return x


@pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")
@pytest.mark.parametrize("codec", list(V3_COMPRESSORS))
@pytest.mark.parametrize("dtype", DTYPES + BIG)
def test_v3_dtypes_and_codecs(tmp_path, device, dtype, codec):
    dt = np.dtype(dtype)
    serializer = BytesCodec(endian="big" if dt.byteorder == ">" else "little")
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(37, 29),
        chunks=(16, 10),
        dtype=dt.newbyteorder("="),
        serializer=serializer,
        compressors=V3_COMPRESSORS[codec],
        fill_value=0,
    )
    a[...] = sample(a.shape, dt.newbyteorder("="))
    _check(tmp_path / "a.zarr", device, chunks=(20, 29))


@pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")
@pytest.mark.parametrize("codec", list(V2_COMPRESSORS))
@pytest.mark.parametrize("dtype", DTYPES + BIG)
def test_v2_dtypes_and_codecs(tmp_path, device, dtype, codec):
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(33, 41),
        chunks=(8, 16),
        dtype=dtype,
        zarr_format=2,
        compressors=V2_COMPRESSORS[codec],
        fill_value=0,
    )
    a[...] = sample(a.shape, dtype)
    _check(tmp_path / "a.zarr", device, chunks=(9, 41))


@pytest.mark.parametrize("separator", [".", "/"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_v2_order_and_separator(tmp_path, device, order, separator):
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(20, 13, 7),
        chunks=(6, 5, 4),
        dtype=">f8",
        zarr_format=2,
        order=order,
        chunk_key_encoding={"name": "v2", "separator": separator},
        compressors=numcodecs.Zstd(level=1),
    )
    a[...] = sample(a.shape, "f8")
    _check(tmp_path / "a.zarr", device, chunks=(7, 13, 3))


@pytest.mark.parametrize("order", [(1, 0, 2), (2, 1, 0), (0, 1, 2)])
@pytest.mark.parametrize("separator", ["/", "."])
def test_v3_transpose_and_key_encoding(tmp_path, device, order, separator):
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(11, 9, 14),
        chunks=(4, 5, 6),
        dtype="i4",
        filters=[TransposeCodec(order=order)],
        compressors=[ZstdCodec(level=1)],
        chunk_key_encoding={"name": "default", "separator": separator},
    )
    a[...] = sample(a.shape, "i4")
    _check(tmp_path / "a.zarr", device, chunks=(5, 9, 7))


@pytest.mark.parametrize("fill", [np.nan, -7.5, 0.0])
@pytest.mark.parametrize("fmt", [2, 3])
def test_missing_chunks_read_as_fill(tmp_path, device, fill, fmt):
    a = zarr.create_array(
        tmp_path / "a.zarr", shape=(40, 30), chunks=(10, 10), dtype="f4", fill_value=fill, zarr_format=fmt
    )
    a[12:18, 3:25] = sample((6, 22), "f4")  # most chunks are never written
    x = _check(tmp_path / "a.zarr", device)
    assert np.isnan(host(x[0, 0].compute())) == np.isnan(fill)


def test_missing_chunks_complex_and_int_fill(tmp_path, device):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(9,), chunks=(4,), dtype="c8", fill_value=1 + 2j)
    a[:3] = [1, 2, 3]
    _check(tmp_path / "a.zarr", device)
    b = zarr.create_array(tmp_path / "b.zarr", shape=(9,), chunks=(4,), dtype=">u2", fill_value=513)
    b[5:] = 9
    _check(tmp_path / "b.zarr", device)


@pytest.mark.parametrize(
    "shape,chunks,dask_chunks",
    [
        ((100,), (7,), (13,)),  # ragged on both grids, unaligned
        ((5, 3), (64, 64), None),  # chunk larger than the array
        ((31, 17, 5), (8, 4, 5), (11, 6, 2)),
        ((64, 64), (16, 16), "auto"),
        ((64, 64), (16, 16), "4KiB"),
        ((0, 5), (4, 4), None),  # empty array
        ((), (), None),  # zero-dimensional
    ],
)
def test_layouts(tmp_path, device, shape, chunks, dask_chunks):
    a = zarr.create_array(tmp_path / "a.zarr", shape=shape, chunks=chunks, dtype="i2", fill_value=3)
    if a.size:
        a[...] = sample(shape, "i2")
    _check(tmp_path / "a.zarr", device, chunks=dask_chunks)


def test_slicing(tmp_path, device):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(50, 40), chunks=(8, 8), dtype="f4")
    ref = sample(a.shape, "f4")
    a[...] = ref
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(13, 40), device=device)
    for sel in [np.s_[3:47:5, ::3], np.s_[::-2, 7], np.s_[10, 5], np.s_[-9:, -1:-30:-4], np.s_[20:20]]:
        np.testing.assert_array_equal(host(x[sel].compute()), ref[sel])


def test_group_component_and_open_array(tmp_path, device):
    g = zarr.open_group(tmp_path / "g.zarr", mode="w")
    sub = g.create_group("sub")
    a = sub.create_array("x", shape=(30, 4), chunks=(7, 4), dtype="u8")
    a[...] = sample(a.shape, "u8")
    _check(tmp_path / "g.zarr", device, component="sub/x")
    np.testing.assert_array_equal(host(from_zarr_gpu(a, device=device).compute()), a[...])


@pytest.mark.parametrize("codec", ["zstd", "gzip", None])
def test_arrays_written_by_tensorstore(tmp_path, device, codec):
    ts = pytest.importorskip("tensorstore")
    data = sample((40, 24), "f4")
    codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if codec:  # tensorstore's zstd frames carry no content size: sizes come from the metadata
        codecs.append({"name": codec, "configuration": {"level": 1}})
    spec = {
        "driver": "zarr3",
        "kvstore": {"driver": "file", "path": str(tmp_path / "a.zarr")},
        "metadata": {
            "shape": [40, 24],
            "data_type": "float32",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16, 8]}},
            "codecs": codecs,
        },
        "create": True,
    }
    ts.open(spec).result().write(data).result()
    _check(tmp_path / "a.zarr", device, chunks=(20, 24))


@pytest.mark.filterwarnings("ignore::zarr_dask_gpu.ZarrGpuWarning")
@pytest.mark.parametrize("cname", ["lz4", "lz4hc", "zstd", "zlib", "blosclz"])
@pytest.mark.parametrize(
    "shuffle", [numcodecs.Blosc.NOSHUFFLE, numcodecs.Blosc.SHUFFLE, numcodecs.Blosc.BITSHUFFLE]
)
@pytest.mark.parametrize("dtype", ["u1", "i2", "f4", ">f8", "c16"])
def test_v2_blosc(tmp_path, device, cname, shuffle, dtype):
    """Blosc frames of several blocks and a partial last block; blosclz decodes on the CPU."""
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(700, 77),
        chunks=(300, 77),
        dtype=dtype,
        zarr_format=2,
        compressors=numcodecs.Blosc(cname=cname, clevel=5, shuffle=shuffle, blocksize=4000),
    )
    a[...] = sample(a.shape, dtype)
    _check(tmp_path / "a.zarr", device, chunks=(350, 77))


@pytest.mark.parametrize("cname", ["lz4", "zstd"])
@pytest.mark.parametrize("shuffle", [numcodecs.Blosc.SHUFFLE, numcodecs.Blosc.BITSHUFFLE])
@pytest.mark.parametrize("dtype", ["i2", "f8"])
@pytest.mark.parametrize("blocksize", [1 << 15, 1 << 17])
def test_v2_blosc_large_blocks(tmp_path, device, cname, shuffle, dtype, blocksize):
    """Blocks of 32 KiB, aligned, unshuffle in place through shared memory on the GPU; those of 128 KiB
    from a scratch (``gpu/decoders/blosc.py``, ``_IN_PLACE_MAX``)."""
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(1000, 300),
        chunks=(500, 300),
        dtype=dtype,
        zarr_format=2,
        compressors=numcodecs.Blosc(cname=cname, clevel=1, shuffle=shuffle, blocksize=blocksize),
    )
    a[...] = sample(a.shape, dtype)
    _check(tmp_path / "a.zarr", device, chunks=(500, 300))


@pytest.mark.parametrize(
    "dtype,filters,compressor",
    [
        ("i4", [numcodecs.Delta(dtype="i4")], numcodecs.Zstd(level=1)),
        ("i8", [numcodecs.Delta(dtype="i8", astype="i2")], numcodecs.LZ4()),
        ("f8", [numcodecs.FixedScaleOffset(offset=10, scale=10, dtype="f8", astype="i2")], numcodecs.Blosc()),
        ("f4", [numcodecs.Quantize(digits=2, dtype="f4")], numcodecs.Zlib(level=1)),
        ("f8", [numcodecs.AsType(encode_dtype="f4", decode_dtype="f8")], None),
        ("i2", [numcodecs.Shuffle(elementsize=2)], numcodecs.GZip(level=1)),
        ("f4", [numcodecs.BitRound(keepbits=10), numcodecs.Shuffle(elementsize=4)], numcodecs.Zstd(level=1)),
    ],
    ids=lambda v: str(v)[:40],
)
def test_v2_filters(tmp_path, device, dtype, filters, compressor):
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(90, 31),
        chunks=(40, 31),
        dtype=dtype,
        zarr_format=2,
        filters=filters,
        compressors=compressor,
    )
    a[...] = sample(a.shape, dtype) / (3 if dtype.startswith("f") else 1)
    _check(tmp_path / "a.zarr", device, chunks=(45, 31))


@pytest.mark.parametrize(
    "dtype,filters",
    [
        ("i4", [nz3.Delta(dtype="i4")]),
        ("i8", [nz3.Delta(dtype="i8", astype="i2")]),
        ("f8", [nz3.FixedScaleOffset(offset=1, scale=100, dtype="f8", astype="i4")]),
        ("f4", [nz3.Quantize(digits=2, dtype="f4")]),
        ("f4", [nz3.BitRound(keepbits=9)]),
        ("f8", [nz3.AsType(encode_dtype="f4", decode_dtype="f8")]),
    ],
    ids=lambda v: str(v)[:40],
)
def test_v3_numcodecs_filters(tmp_path, device, dtype, filters):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(70, 13), chunks=(32, 13), dtype=dtype, filters=filters)
    a[...] = sample(a.shape, dtype) / (3 if dtype.startswith("f") else 1)
    _check(tmp_path / "a.zarr", device, chunks=(35, 13))


@pytest.mark.parametrize(
    "dtype,compressors,order",
    [
        ("f4", [nz3.Shuffle(elementsize=4), zarr.codecs.ZstdCodec()], None),
        ("i2", [nz3.Shuffle(elementsize=2), zarr.codecs.GzipCodec()], None),
        ("f8", [nz3.Shuffle(elementsize=8), zarr.codecs.ZstdCodec()], (1, 0)),
        ("u1", [nz3.Shuffle(elementsize=1)], None),
    ],
    ids=lambda v: str(v)[:30],
)
def test_v3_numcodecs_shuffle(tmp_path, device, dtype, compressors, order):
    """numcodecs.shuffle is a bytes-to-bytes codec in v3: undone on the device after decompression."""
    from zarr_dask_gpu.resolve import open_array_info

    filters = [zarr.codecs.TransposeCodec(order=order)] if order else None
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(70, 13),
        chunks=(32, 13),
        dtype=dtype,
        filters=filters,
        compressors=compressors,
    )
    a[...] = sample(a.shape, dtype)
    assert open_array_info(tmp_path / "a.zarr").chain.gpu is not None  # not the CPU fallback
    _check(tmp_path / "a.zarr", device, chunks=(35, 13))


def test_a_0d_array_computes_to_a_0d_array(tmp_path, device):
    a = zarr.create_array(tmp_path / "z.zarr", shape=(), dtype="f4")
    a[...] = 3.5
    got = from_zarr_gpu(tmp_path / "z.zarr", device=device).compute(scheduler="sync")
    assert got.shape == () and not np.isscalar(got) and float(got) == 3.5


@pytest.mark.parametrize("fmt", [2, 3])
@pytest.mark.parametrize("dtype", ["datetime64[s]", "datetime64[ns]", "timedelta64[ms]"])
def test_times_read_as_zarr_python_reads_them(tmp_path, device, dtype, fmt):
    """datetime64 and timedelta64: the dtype itself on the CPU; on the GPU (cupy has none) their int64
    bits, as ``.view("i8")`` gives them; missing chunks read as NaT."""
    a = zarr.create_array(tmp_path / "t.zarr", shape=(10,), chunks=(4,), dtype=dtype, zarr_format=fmt)
    a[:7] = np.arange(7).astype(dtype)  # the last chunk is never written
    got = host(from_zarr_gpu(tmp_path / "t.zarr", device=device).compute(scheduler="sync"))
    want = a[...]
    if device == "cpu":
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    else:
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want.view(np.int64))


def test_strings_read_through_zarr_python_on_the_cpu(tmp_path, device):
    from zarr_dask_gpu.errors import UnsupportedDtypeError

    s = zarr.create_array(tmp_path / "s.zarr", shape=(5,), chunks=(2,), dtype=str)
    s[...] = np.array(["a", "bb", "c", "dd", "e"])
    if device == "cpu":
        x = from_zarr_gpu(tmp_path / "s.zarr", device="cpu")
        assert x.chunks == ((2, 2, 1),)
        np.testing.assert_array_equal(x.compute(), s[...])
    else:
        with pytest.raises(UnsupportedDtypeError, match=r"no GPU form; read it with device='cpu'"):
            from_zarr_gpu(tmp_path / "s.zarr", device="gpu")
