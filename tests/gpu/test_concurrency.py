"""Concurrent tasks on the GPU: device-resident blocks, tasks of several codecs at once, joined nvCOMP
calls, decode calls split by size, the streams' priorities."""

import numcodecs
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import from_zarr_gpu

from ..helpers import host, sample

pytestmark = pytest.mark.gpu


def test_blocks_stay_on_device_and_threads_decode_concurrently(tmp_path):
    import cupy as cp
    import dask

    a = zarr.create_array(tmp_path / "a.zarr", shape=(256, 4096), chunks=(8, 4096), dtype="f4")
    a[...] = sample(a.shape, "f4")
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 4096), device="gpu")
    with dask.config.set(scheduler="threads", num_workers=8):
        for _ in range(3):  # many tasks at once, each thread with its own stream and codec
            y = x.persist()
            blocks = [b.compute(scheduler="sync") for b in y.blocks]
            assert all(isinstance(b, cp.ndarray) for b in blocks)
            np.testing.assert_array_equal(host(y.compute()), a[...])


def test_large_batch_in_one_task(tmp_path):
    import dask

    a = zarr.create_array(tmp_path / "a.zarr", shape=(512, 2048), chunks=(1, 2048), dtype="i8")
    a[...] = sample(a.shape, "i8")
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=-1, device="gpu")  # 512 chunks, one decode call
    np.testing.assert_array_equal(host(x.compute()), a[...])
    with dask.config.set({"zarr_dask_gpu.decode-call-bytes": "1MB"}):  # 61 calls of 8 or 9 chunks
        np.testing.assert_array_equal(host(x.compute()), a[...])


@pytest.mark.parametrize(
    "call_bytes,read_slots,staging,host_below,coalesce,tasks,wait",
    [
        (None, 0, "device", "1MiB", True, 0, None),
        (None, 0, "device", "1MiB", True, 0, "10ms"),
        (None, 0, "device", "1MiB", True, 4, 0),
        (None, 0, "device", "1MiB", False, 0, None),
        ("64KiB", 0, "device", "1MiB", True, 0, "1ms"),
        (None, 2, "device", "1MiB", True, 1, "10ms"),
        (None, 4, "host", "1MiB", True, 4, None),
        (None, 4, "host", 0, True, 3, "10ms"),
    ],
)
def test_concurrent_tasks_of_several_codecs_read_correctly(
    tmp_path, call_bytes, read_slots, staging, host_below, coalesce, tasks, wait
):
    """Tasks of arrays with different codecs (raw and blosc among them) and chunk sizes run at once,
    each on its own stream, with their nvCOMP calls joined (of every task decoding at once, or of
    at most ``join-tasks``, waiting for the others at most ``join-wait``) or each task's
    own, a task's batch in one call or split into calls of about one chunk, with all tasks or two
    at a time reading, and with
    the compressed chunks staged in device memory or in pinned host memory (POSIX or kvikio reads)
    the kernels read over the bus, held until each task's stream is done; every block must still be
    its own."""
    from concurrent.futures import ThreadPoolExecutor

    import dask

    arrays = {}
    for i, (name, codec) in enumerate(
        [
            ("zstd", numcodecs.Zstd(1)),
            ("lz4", numcodecs.LZ4()),
            ("z2", numcodecs.Zstd(3)),
            ("raw", None),
            ("blosc", numcodecs.Blosc("lz4", shuffle=numcodecs.Blosc.SHUFFLE)),
        ]
    ):
        a = zarr.create_array(
            tmp_path / f"{name}.zarr",
            shape=(96, 3000),
            chunks=(4 + i, 3000),
            dtype="f4",
            zarr_format=2,
            compressors=codec,
        )
        a[...] = sample(a.shape, "f4", seed=i)
        arrays[name] = (a, from_zarr_gpu(tmp_path / f"{name}.zarr", chunks=(12, 3000), device="gpu"))
    settings = {
        "decode-call-bytes": call_bytes,
        "read-slots": read_slots,
        "staging": staging,
        "host-read-below": host_below,
        "join-decodes": coalesce,
        "join-tasks": tasks,
        "join-wait": wait,
    }
    with dask.config.set({f"zarr_dask_gpu.{k}": v for k, v in settings.items()}):

        def read(name: str) -> None:
            a, x = arrays[name]
            np.testing.assert_array_equal(host(x.compute(scheduler="threads", num_workers=8)), a[...])

        with ThreadPoolExecutor(6) as ex:
            list(ex.map(read, list(arrays) * 4))


def test_tasks_decoding_at_once_share_one_nvcomp_call(tmp_path, monkeypatch):
    """With ``join-decodes`` five tasks decoding at once make one call of their 20 chunks, each
    task still getting its own values, and the fifth, with a damaged chunk (the zstd kernels judge it
    in the joined call), its own error naming the key. With ``join-tasks`` 2 they make calls of
    two tasks each, without waiting for a task still on its way; with the setting off each makes its
    own. With ``join-wait`` the task on its way holds them up no longer than that. With
    ``join-below`` at the chunks' size (64 KiB) each makes its own call, held by no one."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import dask

    from zarr_dask_gpu.errors import ChunkDecodeError
    from zarr_dask_gpu.gpu.decoders import decompress, joined

    for name in ("a", "b"):
        z = zarr.create_array(tmp_path / f"{name}.zarr", shape=(64, 4096), chunks=(4, 4096), dtype="f4")
        z[...] = sample(z.shape, "f4")
    bad = tmp_path / "b.zarr" / "c" / "1" / "0"
    bad.write_bytes(bad.read_bytes()[:-7])
    want = zarr.open_array(tmp_path / "a.zarr")[...]
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 4096), device="gpu")  # 4 blocks of 4 chunks
    damaged = from_zarr_gpu(tmp_path / "b.zarr", chunks=(16, 4096), device="gpu").blocks[0]
    x.blocks[0].compute(scheduler="sync")  # kernels compiled before the timed wait below
    calls: list[int] = []
    launch = decompress.launch

    def counted(compression, src, *args):  # the real nvCOMP call, counted
        calls.append(len(src))
        return launch(compression, src, *args)

    monkeypatch.setattr(decompress, "launch", counted)
    for coalesce, most, patience, below, sizes in (
        (True, 0, None, "64MiB", [20]),
        (True, 2, None, "64MiB", [4, 8, 8]),
        (False, 0, None, "64MiB", [4, 4, 4, 4, 4]),
        (True, 0, "10ms", "64MiB", None),
        (True, 0, None, "64KiB", [4, 4, 4, 4, 4]),
    ):
        calls.clear()
        settings = {
            "zarr_dask_gpu.join-decodes": coalesce,
            "zarr_dask_gpu.join-tasks": most,
            "zarr_dask_gpu.join-wait": patience,
            "zarr_dask_gpu.join-below": below,
        }
        with dask.config.set(settings), ThreadPoolExecutor(5) as ex:
            with joined.member():  # a task on its way: a joined call of every task waits for it
                futures = [
                    ex.submit(lambda i: host(x.blocks[i].compute(scheduler="sync")), i) for i in range(4)
                ]
                broken = ex.submit(damaged.compute, scheduler="sync")
                time.sleep(2)  # the five read and wait
                # held up only when joined calls wait, unbounded, for a task on its way: every task,
                # or the odd one out of the pairs
                done = all(f.done() for f in [*futures, broken])
                joining = coalesce and below == "64MiB"
                assert done != (joining and patience is None and (not most or 5 % most != 0))
            np.testing.assert_array_equal(np.concatenate([f.result() for f in futures]), want)
            with pytest.raises(ChunkDecodeError, match="c/1/0"):
                broken.result()
        assert sorted(calls) == sizes if sizes is not None else sum(calls) == 20


def test_task_streams_have_a_higher_priority_than_the_joined_calls():
    """A task's stream has a higher priority (a lower number) than the streams of joined decode calls,
    and is the thread's one stream on its device."""
    from zarr_dask_gpu.gpu.runtime import streams

    with streams.joining_stream() as joined:
        mine = streams.task_stream()
        assert mine.priority < joined.priority
        assert streams.task_stream() is mine
