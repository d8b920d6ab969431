"""CPU mode's backend: how its tasks share the machine's cores."""

import threading

import dask
import numpy as np
import zarr

from zarr_dask_gpu import backends, from_zarr_gpu


def test_cpu_tasks_share_one_decode_pool(tmp_path, monkeypatch):
    """CPU tasks running at once decode their chunks on one pool of ``cpu-threads`` threads, not each
    on threads of its own (nested pools oversubscribed the cores: docs/decisions/task-overlap.md)."""
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 1000), chunks=(2, 1000), dtype="f8")
    ref = np.random.default_rng(2).random(a.shape)
    a[...] = ref
    seen, real = set(), backends.decode_chunk

    def recording(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(backends, "decode_chunk", recording)
    with dask.config.set({"zarr_dask_gpu.cpu-threads": 3}):
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(8, 1000), device="cpu")  # 4 chunks a task
        np.testing.assert_array_equal(x.compute(scheduler="threads", num_workers=8), ref)
    assert 1 <= len(seen) <= 3
    assert all(name.startswith("zarr-dask-gpu-decode") for name in seen)


def test_a_host_block_holds_each_stored_chunk_s_part_decoded_on_the_pool(tmp_path, monkeypatch):
    """``host_block`` (the GPU path's decode of chains the GPU cannot decode, before one upload): the
    block's stored chunks decoded on the shared pool, each part in place, absent chunks left as made
    and said to be absent."""
    from numcodecs import Shuffle, Zlib

    from zarr_dask_gpu.plan import block_pieces
    from zarr_dask_gpu.resolve import open_array_info

    a = zarr.create_array(
        tmp_path / "n.zarr",
        shape=(40, 30),
        chunks=(8, 10),
        dtype="f4",
        zarr_format=2,
        filters=[Shuffle(elementsize=4), Zlib(level=4)],
        compressors=None,
        fill_value=-1,
    )
    ref = np.random.default_rng(3).random((24, 30)).astype("f4")
    a[:24] = ref
    info = open_array_info(tmp_path / "n.zarr")
    start, stop = (4, 5), (36, 27)
    pieces = block_pieces(start, stop, info.chunks)
    seen, real = set(), backends.decode_chunk

    def recording(*args, **kwargs):
        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(backends, "decode_chunk", recording)
    shape = tuple(b - s for s, b in zip(start, stop, strict=True))
    block, present = backends.host_block(info, pieces, shape, lambda s, d: np.full(s, 7, d))
    want = a[4:36, 5:27]
    stored = [p.coords[0] < 3 for p in pieces]  # rows 0..23 written: chunk rows 0, 1, 2
    assert present == stored
    for p, here in zip(pieces, present, strict=True):
        got = block[p.block_sel]
        np.testing.assert_array_equal(got, want[p.block_sel] if here else np.full(got.shape, 7, "f4"))
    assert seen and all(name.startswith("zarr-dask-gpu-decode") for name in seen)
