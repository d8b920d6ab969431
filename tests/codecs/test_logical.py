"""The device path's last step, on the host: each stored chunk, decompressed by numcodecs, then
``logical_chunk`` with numpy (the same code runs on cupy) must equal zarr-python's chunk."""

import itertools

import numcodecs
import numcodecs.zarr3 as nz3
import numpy as np
import pytest
import zarr

from zarr_dask_gpu.codecs.logical import logical_chunk
from zarr_dask_gpu.resolve import open_array_info

from ..helpers import sample

DECOMPRESS = {
    "none": lambda b: b,
    "zstd": numcodecs.Zstd().decode,
    "gzip": numcodecs.GZip().decode,
    "zlib": numcodecs.Zlib().decode,
    "lz4": numcodecs.LZ4().decode,
    **{f"blosc-{c}": numcodecs.Blosc().decode for c in ("lz4", "zstd", "zlib")},
}

CASES = {
    "v3 zstd": dict(dtype="f4"),
    "v3 big-endian": dict(dtype="f8", serializer=zarr.codecs.BytesCodec(endian="big")),
    "v3 big-endian complex": dict(dtype="c8", serializer=zarr.codecs.BytesCodec(endian="big")),
    "v3 transpose": dict(dtype="i2", filters=[zarr.codecs.TransposeCodec(order=(1, 0))]),
    "v3 crc32c": dict(dtype="u4", compressors=[zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()]),
    "v3 shuffle": dict(dtype="f8", compressors=[nz3.Shuffle(elementsize=8), zarr.codecs.ZstdCodec()]),
    "v3 shuffle transpose": dict(
        dtype="i4",
        filters=[zarr.codecs.TransposeCodec(order=(1, 0))],
        compressors=[nz3.Shuffle(elementsize=4)],
    ),
    "v3 delta": dict(dtype="i8", filters=[nz3.Delta(dtype="i8", astype="i4")]),
    "v2 F order": dict(dtype="f4", zarr_format=2, order="F", compressors=numcodecs.Zlib()),
    "v2 blosc bitshuffle": dict(
        dtype="i2", zarr_format=2, compressors=numcodecs.Blosc("zstd", shuffle=numcodecs.Blosc.BITSHUFFLE)
    ),
    "v2 filters": dict(
        dtype="f8",
        zarr_format=2,
        filters=[
            numcodecs.FixedScaleOffset(offset=1, scale=10, dtype="f8", astype="i4"),
            numcodecs.Shuffle(4),
        ],
        compressors=numcodecs.LZ4(),
    ),
    "v2 big-endian gzip": dict(dtype=">i4", zarr_format=2, compressors=numcodecs.GZip()),
}


@pytest.mark.parametrize("case", list(CASES))
def test_logical_chunk_matches_zarr(tmp_path, case):
    kwargs = dict(CASES[case])
    a = zarr.create_array(tmp_path / "a.zarr", shape=(21, 10), chunks=(8, 10), **kwargs)
    values = sample(a.shape, np.dtype(kwargs["dtype"]).newbyteorder("="))
    a[...] = values / 10 if values.dtype.kind == "f" else values
    info = open_array_info(tmp_path / "a.zarr")
    chain = info.chain.gpu
    assert chain is not None, case
    for coords in itertools.product(
        *(range(-(-n // c)) for n, c in zip(info.shape, info.chunks, strict=True))
    ):
        with open(info.chunk_path(coords), "rb") as f:
            stored = f.read()
        if chain.crc32c:
            stored = stored[:-4]
        raw = np.frombuffer(bytes(DECOMPRESS[chain.compression](stored)), dtype=np.uint8)
        got = logical_chunk(np, raw, info.chunks, info.dtype, chain)
        region = tuple(
            slice(i * c, min((i + 1) * c, n)) for i, c, n in zip(coords, info.chunks, info.shape, strict=True)
        )
        want = a[region]
        np.testing.assert_array_equal(
            got[tuple(slice(0, s) for s in want.shape)], want, err_msg=f"{case} {coords}"
        )
