"""The native batch reader (``zarr_dask_gpu/_preads.c``): many files read or sized by a few threads
without the GIL, each failure reported for its file; and the readers built on it."""

import errno
import os

import dask
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import _preads, from_zarr_gpu
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.storage import readers as zio
from zarr_dask_gpu.storage.units import Range, locate


def _files(tmp_path, sizes, seed=0):
    rng = np.random.default_rng(seed)
    paths, blobs = [], []
    for i, n in enumerate(sizes):
        blob = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        path = tmp_path / f"f{i}"
        path.write_bytes(blob)
        paths.append(str(path))
        blobs.append(blob)
    return paths, blobs


def _read(paths, offsets, sizes, starts, total, threads):
    buf = np.full(total, 0xEE, dtype=np.uint8)
    errors = np.full(len(paths), 7, dtype=np.int32)
    arr = [np.asarray(v, dtype=np.int64) for v in (offsets, sizes, starts)]
    _preads.read(buf, paths, *arr, errors, threads)
    return buf, errors


@pytest.mark.parametrize("threads", [1, 3, 16, 200])
def test_reads_land_where_asked(tmp_path, threads):
    rng = np.random.default_rng(threads)
    lengths = [*rng.integers(0, 300000, 97).tolist(), 0, 1, 4096]
    paths, blobs = _files(tmp_path, lengths)
    offsets = [int(rng.integers(0, n + 1)) for n in lengths]
    sizes = [int(rng.integers(0, n - o + 1)) for n, o in zip(lengths, offsets, strict=True)]
    starts = np.cumsum([0, *[s + 3 for s in sizes]])[:-1]  # gaps between reads stay untouched
    buf, errors = _read(paths, offsets, sizes, starts, int(starts[-1] + sizes[-1] + 3), threads)
    assert not errors.any()
    for blob, o, s, at in zip(blobs, offsets, sizes, starts, strict=True):
        assert buf[at : at + s].tobytes() == blob[o : o + s]
        assert buf[at + s : at + s + 3].tolist() == [0xEE] * 3


def test_each_failure_is_reported_for_its_file(tmp_path):
    paths, _ = _files(tmp_path, [100, 100, 100])
    (tmp_path / "dir").mkdir()
    bad = [paths[0], str(tmp_path / "missing"), paths[1], str(tmp_path / "dir"), paths[2]]
    _buf, errors = _read(bad, [0, 0, 50, 0, 0], [100, 10, 60, 10, 100], [0, 100, 200, 300, 400], 500, 4)
    assert errors.tolist() == [0, errno.ENOENT, -1, errno.EISDIR, 0]  # -1: the file ended first


def test_no_files_and_bad_arguments(tmp_path):
    _buf, errors = _read([], [], [], [], 0, 4)
    assert errors.size == 0
    paths, _ = _files(tmp_path, [100])
    with pytest.raises(ValueError, match=r"read 0 .*f0.* does not fit the buffer"):
        _read(paths, [0], [100], [1], 100, 1)
    with pytest.raises(ValueError, match="offsets: 16 bytes, expected 8"):
        _preads.read(
            np.zeros(100, np.uint8),
            paths,
            np.zeros(2, np.int64),
            *[np.zeros(1, np.int64)] * 2,
            np.zeros(1, np.int32),
            1,
        )
    with pytest.raises((TypeError, BufferError)):  # a read-only buffer
        _preads.read(b"x" * 100, paths, *[np.zeros(1, np.int64)] * 3, np.zeros(1, np.int32), 1)


def test_sizes(tmp_path):
    paths, _ = _files(tmp_path, [0, 5, 300_000])
    (tmp_path / "afile").write_bytes(b"x")
    asked = [*paths, str(tmp_path / "missing"), str(tmp_path / "afile" / "below")]
    sizes, errors = np.zeros(5, np.int64), np.zeros(5, np.int32)
    _preads.sizes(asked, sizes, errors, 2)
    assert sizes.tolist() == [0, 5, 300_000, -1, -1]
    assert errors.tolist() == [0, 0, 0, 0, errno.ENOTDIR]


def test_locate_names_a_path_it_cannot_size(tmp_path):
    zarr.create_array(tmp_path / "a.zarr", shape=(8,), chunks=(4,), dtype="i4")[...] = 1
    info = open_array_info(str(tmp_path / "a.zarr"))
    assert [r.size > 0 for r in locate(info, [(0,), (1,)])] == [True, True]
    os.remove(info.chunk_path((1,)))
    assert locate(info, [(1,)]) == [None]  # a missing chunk
    os.remove(info.chunk_path((0,)))
    os.makedirs(os.path.join(info.chunk_path((0,)), "x"))
    with pytest.raises(OSError, match=r"c/0"):
        from_zarr_gpu(tmp_path / "a.zarr", device="cpu").compute(scheduler="sync")


def test_a_file_gone_after_it_was_located_raises_naming_it(tmp_path):
    paths, _ = _files(tmp_path, [100, 100])
    plan = zio.layout([Range(p, 0, 100) for p in paths], 0, 1)
    os.remove(paths[1])
    with pytest.raises(FileNotFoundError, match="f1"):
        zio.pread_all(np.zeros(plan.total, np.uint8), plan)


@pytest.mark.parametrize("threads", [1, 2, 16])
def test_host_reader_over_many_small_chunks(tmp_path, threads):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(300, 70), chunks=(7, 3), dtype="f8")
    ref = np.random.default_rng(1).random(a.shape)
    ref[:7] = 0  # the array's fill value: those chunks are not written
    a[...] = ref
    with dask.config.set({"zarr_dask_gpu.cpu-threads": threads}):
        got = from_zarr_gpu(tmp_path / "a.zarr", chunks=(100, 70), device="cpu").compute(scheduler="sync")
    np.testing.assert_array_equal(got, zarr.open_array(tmp_path / "a.zarr")[...])
