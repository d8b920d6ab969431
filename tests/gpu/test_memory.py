"""Device memory: transfers over the bus, a task's peak and what it keeps once it ends, when a task
makes its block."""

import numpy as np
import pytest
import zarr

from zarr_dask_gpu import from_zarr_gpu

from ..helpers import sample

pytestmark = pytest.mark.gpu


def test_transfers_by_kernels_over_the_bus_round_trip():
    """``transfer.upload`` and ``transfer.read`` (kernels through mapped pinned memory) give back what
    went in, columns of mixed dtypes converted each on its own, empty ones included, on the stream
    they are given."""
    import cupy as cp

    from zarr_dask_gpu.gpu.runtime import transfer

    stream = cp.cuda.Stream(non_blocking=True)
    big = np.array([2**63 + 5, 7], np.uint64)
    with stream:
        up, pinned = transfer.upload([np.arange(5, dtype=np.int64), big, np.zeros(0, np.int32)], np.uint64)
        back = transfer.read(up, stream)
        del pinned
        assert back.tolist() == [0, 1, 2, 3, 4, 2**63 + 5, 7]
        grid = cp.arange(24, dtype=np.int32).reshape(2, 3, 4)
        assert np.array_equal(transfer.read(grid, stream), np.arange(24, dtype=np.int32).reshape(2, 3, 4))
        empty, _ = transfer.upload([np.zeros(0, np.int64)], np.int64)
        assert empty.size == 0 and transfer.read(empty, stream).size == 0


@pytest.mark.parametrize("call_bytes", [None, "64MiB"])
def test_a_task_peak_device_memory_stays_within_3x_its_block(tmp_path, call_bytes):
    """Staging, block and nvCOMP's scratch (all from cupy's pool) of one 256 MiB task of the
    benchmark's data (8 MiB zstd chunks): at most 3x the block with one nvCOMP call, less with
    ``decode-call-bytes``. The pool's held bytes after a fresh start bound the task's peak."""
    import cupy as cp
    import dask

    from zarr_dask_gpu.resolve import open_array_info
    from zarr_dask_gpu.task import read_region
    from zarr_dask_gpu.testing.sample_stores import write_sample

    a = write_sample(str(tmp_path / "a.zarr"), 256 << 20, 8 << 20)
    info = open_array_info(str(tmp_path / "a.zarr"))
    pool = cp.get_default_memory_pool()
    read_region(info, (0, 0), a.chunks, "gpu", False)  # warm: kernels compiled, stream made
    with dask.config.set({"zarr_dask_gpu.decode-call-bytes": call_bytes}):
        cp.cuda.Device().synchronize()
        pool.free_all_blocks()
        before = pool.total_bytes()
        block = read_region(info, (0, 0), a.shape, "gpu", False)
        cp.cuda.Device().synchronize()
        peak = (pool.total_bytes() - before) / block.nbytes
    np.testing.assert_array_equal(block.get(), a[...])
    assert peak <= (3.0 if call_bytes is None else 2.2), peak


@pytest.mark.parametrize("host_below", ["1MiB", 0])  # the host's preads, kvikio's
def test_a_task_makes_its_block_once_its_chunks_are_read(tmp_path, host_below):
    """The GPU backend calls a block's ``make`` once, while the block's reads are under way (inside
    their span: tasks waiting for a read slot hold no block yet), and fills and returns the block it
    made."""
    import time

    import cupy as cp
    import dask

    from zarr_dask_gpu import phases
    from zarr_dask_gpu.plan import BlockRequest, block_pieces
    from zarr_dask_gpu.resolve import open_array_info
    from zarr_dask_gpu.task import get_backend

    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 4096), chunks=(8, 4096), dtype="f4")
    a[...] = sample(a.shape, "f4")
    info = open_array_info(str(tmp_path / "a.zarr"))
    made: list = []

    def make():
        made.append((time.perf_counter(), cp.empty(a.shape, dtype=a.dtype)))
        return made[-1][1]

    backend = get_backend("gpu")
    with (
        dask.config.set({"zarr_dask_gpu.host-read-below": host_below}),
        phases.collect() as spans,
        backend.context(),
    ):
        [(out, stored)] = backend.decode_many(
            [BlockRequest(info, block_pieces((0, 0), a.shape, info.chunks), make)]
        )
    [(when, block)] = made
    [read] = [s for s in spans if s.name == "read"]
    assert read.start <= when <= read.end
    assert out is block and all(stored)
    np.testing.assert_array_equal(out.get(), a[...])


def test_a_task_keeps_none_of_its_device_memory_once_it_ends(tmp_path):
    """A block computed and dropped leaves none of its task's device memory in use: the thread that
    ran the task keeps no reference to its block (the chunks its errors name) until its next task."""
    import cupy as cp

    from zarr_dask_gpu.testing.sample_stores import write_sample

    a = write_sample(str(tmp_path / "a.zarr"), 64 << 20, 8 << 20)
    x = from_zarr_gpu(str(tmp_path / "a.zarr"))
    pool = cp.get_default_memory_pool()
    cp.cuda.Device().synchronize()
    before = pool.used_bytes()
    z = x.blocks[0, 0].compute(scheduler="sync")
    nbytes = z.nbytes
    np.testing.assert_array_equal(z.get(), a[: z.shape[0]])
    del z
    cp.cuda.Device().synchronize()
    assert pool.used_bytes() - before < nbytes // 4, (pool.used_bytes() - before) / nbytes
