"""The GPU path's host decode of the compressions its row gives the host (gzip, zlib): chunks read to
pinned host memory, decoded on the shared pool, copied to the device once, the filters undone there."""

import threading

import numcodecs
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import from_zarr_gpu

from ..damage import zlib_array
from ..helpers import host, sample

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(
    "compressor, filters",
    [
        (numcodecs.Zlib(4), None),
        (numcodecs.GZip(1), [numcodecs.Delta(dtype="i4")]),
        (None, [numcodecs.Shuffle(elementsize=4), numcodecs.Zlib(4)]),  # kerchunk's HDF5 chain
    ],
    ids=["zlib", "delta-gzip", "shuffle-zlib-as-filters"],
)
@pytest.mark.parametrize("group", [32 << 20, 1], ids=["one-group", "a-group-a-chunk"])
def test_blocks_of_host_streams_decode_on_the_pool_and_never_go_to_the_device_and_back(
    tmp_path, monkeypatch, compressor, filters, group
):
    from zarr_dask_gpu.gpu import backend
    from zarr_dask_gpu.gpu.decoders import host_decode

    monkeypatch.setattr(backend, "_HOST_GROUP", group)  # a block read and decoded in groups of this

    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(96, 70),
        chunks=(16, 35),  # blocks of several chunks, some placed whole, some cut by the block's edge
        dtype="i4",
        zarr_format=2,
        compressors=compressor,
        filters=filters,
        fill_value=7,
    )
    a[:80] = sample((80, 70), "i4")  # the last row of chunks never written: the fill value
    threads, real = set(), host_decode.decode_into

    def recording(*args):
        threads.add(threading.current_thread().name)
        return real(*args)

    def refused(*args):
        raise AssertionError("a chunk went to the device and back")

    monkeypatch.setattr(host_decode, "decode_into", recording)
    monkeypatch.setattr(host_decode, "decode", refused)
    for chunks in [(32, 70), (40, 35), (96, 70)]:
        got = host(from_zarr_gpu(tmp_path / "a.zarr", chunks=chunks, device="gpu").compute())
        np.testing.assert_array_equal(got, a[...])
    assert threads and all(t.startswith("zarr-dask-gpu-decode") for t in threads)


def test_a_damaged_chunk_among_groups_raises_naming_it_and_the_next_read_is_whole(tmp_path, monkeypatch):
    """A block read and decoded in several groups: the damaged chunk raises, naming its key, only once
    every group's decodes are done (none copies into memory the task no longer owns), and the next
    reads of the same and of another array are right."""
    from zarr_dask_gpu import ChunkDecodeError
    from zarr_dask_gpu.gpu import backend

    monkeypatch.setattr(backend, "_HOST_GROUP", 1)
    good = zlib_array(tmp_path / "good.zarr", (64, 256), (4, 256))
    zlib_array(tmp_path / "bad.zarr", (64, 256), (4, 256), damaged="5.0")
    for _ in range(3):
        with pytest.raises(ChunkDecodeError, match=r"5\.0"):
            from_zarr_gpu(tmp_path / "bad.zarr", chunks=(64, 256), device="gpu").compute()
        got = host(from_zarr_gpu(tmp_path / "good.zarr", chunks=(64, 256), device="gpu").compute())
        np.testing.assert_array_equal(got, good[...])


def test_lz4_chunks_of_4_mib_or_more_decode_on_the_pool(tmp_path, monkeypatch):
    """A numcodecs lz4 chunk is one lz4 block, which nvCOMP decodes with one thread block: from 4 MiB
    (``host_from``) they decode on the host's pool, smaller ones on the device."""
    from zarr_dask_gpu.gpu.decoders import host_decode

    decoded, real = [], host_decode.decode_into
    monkeypatch.setattr(host_decode, "decode_into", lambda *a: decoded.append(1) or real(*a))
    for rows, on_host in ((1024, True), (512, False)):  # float32 chunks of 4 MiB and of 2 MiB
        path = tmp_path / f"{rows}.zarr"
        a = zarr.create_array(
            path,
            shape=(2048, 1024),
            chunks=(rows, 1024),
            dtype="f4",
            zarr_format=2,
            compressors=numcodecs.LZ4(),
        )
        a[...] = sample(a.shape, "f4")
        decoded.clear()
        np.testing.assert_array_equal(host(from_zarr_gpu(path, device="gpu").compute()), a[...])
        assert bool(decoded) == on_host
