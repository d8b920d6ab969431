"""read_regions: boxes of several arrays read and decoded in one task (one batch of preads, one
nvCOMP batch per compression on the GPU), each equal to zarr-python's read."""

import numcodecs
import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec

from zarr_dask_gpu import ChunkDecodeError
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.task import read_regions

from ..helpers import host, sample


def _arrays(root):
    """Arrays of several chains, dtypes and chunk layouts; some chunks never written."""
    specs = {
        "zstd-rows": dict(shape=(40, 64), chunks=(8, 64), dtype="f4"),  # chunks lie whole in a block
        "zstd-tiles": dict(shape=(40, 64), chunks=(8, 16), dtype="i2"),  # decoded aside, then placed
        "zstd-again": dict(shape=(24, 32), chunks=(8, 32), dtype="f8"),  # merged with zstd-rows
        "raw": dict(shape=(30, 20), chunks=(7, 20), dtype="u1", compressors=None),
        "lz4-v2": dict(
            shape=(30, 20), chunks=(10, 10), dtype="i4", zarr_format=2, compressors=numcodecs.LZ4()
        ),
        "gzip-v2": dict(
            shape=(30, 20), chunks=(10, 20), dtype="f4", zarr_format=2, compressors=numcodecs.GZip(1)
        ),
        "blosc-v2": dict(
            shape=(30, 20),
            chunks=(10, 20),
            dtype="f8",
            zarr_format=2,
            compressors=numcodecs.Blosc("lz4", shuffle=numcodecs.Blosc.SHUFFLE),
        ),
        "crc32c": dict(
            shape=(16, 16), chunks=(4, 16), dtype="u4", compressors=[ZstdCodec(level=1), Crc32cCodec()]
        ),
        "sharded": dict(
            shape=(32, 32),
            chunks=(16, 16),
            dtype="i8",
            serializer=ShardingCodec(chunk_shape=(4, 8), codecs=[BytesCodec(), ZstdCodec(level=1)]),
            compressors=None,
            filters=None,
        ),
    }
    out = {}
    for i, (name, kw) in enumerate(specs.items()):
        a = zarr.create_array(root / f"{name}.zarr", fill_value=3, **kw)
        rows = a.shape[0] * 3 // 4  # the last rows' chunks stay unwritten: the fill value
        a[:rows] = sample((rows, *a.shape[1:]), a.dtype, seed=i)
        out[name] = a
    return out


def test_boxes_of_many_arrays_in_one_task(tmp_path, device):
    arrays = _arrays(tmp_path)
    infos = {n: open_array_info(a) for n, a in arrays.items()}
    boxes = [(infos[n], (0,) * a.ndim, a.shape) for n, a in arrays.items()]
    boxes += [
        (infos["zstd-tiles"], (3, 5), (37, 60)),
        (infos["zstd-rows"], (5, 0), (5, 64)),
    ]  # unaligned, empty
    got = read_regions(boxes, device, False)
    want = [a[...] for a in arrays.values()] + [arrays["zstd-tiles"][3:37, 5:60], arrays["zstd-rows"][5:5]]
    for (info, _, _), g, w in zip(boxes, got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, info.location
        np.testing.assert_array_equal(host(g), w, err_msg=info.location)


def test_a_damaged_chunk_names_its_own_array(tmp_path, device):
    arrays = _arrays(tmp_path)
    infos = {n: open_array_info(a) for n, a in arrays.items()}
    chunk = tmp_path / "zstd-again.zarr" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-7])
    boxes = [(infos[n], (0,) * a.ndim, a.shape) for n, a in arrays.items()]
    with pytest.raises(ChunkDecodeError, match=r"c/1/0.*zstd-again\.zarr"):
        read_regions(boxes, device, False)
    ok = [b for b in boxes if "zstd-again" not in b[0].location]
    for (info, _, _), g in zip(ok, read_regions(ok, device, False), strict=True):  # the same process reads on
        name = info.location.rsplit("/", 1)[-1].removesuffix(".zarr")
        np.testing.assert_array_equal(host(g), arrays[name][...])
