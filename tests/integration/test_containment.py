"""Containment of CUDA faults (issue #27, point 3): the task whose batch faulted raises DeviceFaultError
naming its chunks, the other tasks of the poisoned process wait for its restart, and the worker is
restarted by its nanny while the scheduler recomputes what it held. The fault comes from
``zarr_dask_gpu.testing.faults``: simulated on the CPU, a real sticky CUDA fault on the GPU."""

import pickle
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import zarr
from distributed import LocalCluster, wait

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.distributed import containment
from zarr_dask_gpu.distributed.cluster import connect, local_cluster
from zarr_dask_gpu.errors import DeviceFaultError, ZarrGpuError
from zarr_dask_gpu.task import read_region
from zarr_dask_gpu.testing.faults import FaultPlugin, faulting

from ..helpers import sample

SHAPE, CHUNKS = (64, 1024), (4, 1024)  # 256 KiB of f4, 16 chunks
BAD = 5  # the block (and chunk row) whose decode faults


@pytest.fixture(autouse=True)
def _clean_process():
    """Each test starts and ends with an unpoisoned process (the in-process tests poison this one)."""
    containment.reset()
    yield
    containment.reset()


def _arrays(tmp_path):
    """Two arrays of the same shape: ``a.zarr`` read fine, ``b.zarr`` with the faulting chunk."""
    ref = sample(SHAPE, "f4")
    for name, values in (("a.zarr", ref), ("b.zarr", ref + 1)):
        zarr.create_array(tmp_path / name, shape=SHAPE, chunks=CHUNKS, dtype="f4")[...] = values
    return ref, f"{tmp_path / 'b.zarr'}/c/{BAD}/0"


def _workers(client) -> set[str]:
    return set(client.scheduler_info()["workers"])


def _until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.1)


class _Info:  # what describe() reads of an ArrayInfo
    def __init__(self, location):
        self.location = location

    def chunk_key(self, coords):
        return "c/" + "/".join(map(str, coords))


class _Piece:
    def __init__(self, *coords):
        self.coords = coords


def test_the_error_names_its_store_and_keys_and_survives_pickling():
    keys = tuple(f"c/{i}/0" for i in range(7))
    e = DeviceFaultError("/data/b.zarr", keys, "cudaErrorIllegalAddress: an illegal memory access", True)
    assert isinstance(e, ZarrGpuError)
    assert str(e) == (
        "CUDA error reading chunks 'c/0/0', 'c/1/0', 'c/2/0' and 4 more of /data/b.zarr: "
        "cudaErrorIllegalAddress: an illegal memory access; "
        "the CUDA context of the process is lost (sticky error)"
    )
    back = pickle.loads(pickle.dumps(e))
    assert (back.store, back.keys, back.reason, back.sticky) == (e.store, keys, e.reason, True)
    assert str(back) == str(e)
    one = DeviceFaultError("s", ["c/1"], "cudaErrorLaunchOutOfResources: too many", False)
    assert str(one) == "CUDA error reading chunks 'c/1' of s: cudaErrorLaunchOutOfResources: too many"


def test_sticky_errors_by_code_and_by_name():
    for code in (700, 719, 715, 716, 717, 718, 714, 710, 214):
        assert containment.is_sticky(code)
    for code in (None, 0, 1, 2, 701, 1000):
        assert not containment.is_sticky(code)
    assert containment.names_sticky("cuMemcpyHtoDAsync failed: CUDA_ERROR_ILLEGAL_ADDRESS (700)")
    assert containment.names_sticky("cudaErrorLaunchFailure: unspecified launch failure")
    assert not containment.names_sticky("cudaErrorInvalidValue: invalid argument")


def test_batch_names_keys_once_and_qualifies_them_across_arrays():
    a, b = _Info("/x/a.zarr"), _Info("/x/b.zarr")
    assert containment.describe([(a, [_Piece(0, 1), _Piece(0, 1), _Piece(2, 0)])]) == (
        "/x/a.zarr",
        ("c/0/1", "c/2/0"),
    )
    assert containment.describe([(a, [_Piece(1)], None), (b, [_Piece(2)], None)]) == (
        "/x/a.zarr, /x/b.zarr",
        ("/x/a.zarr/c/1", "/x/b.zarr/c/2"),
    )


def test_the_first_sticky_fault_errs_and_poisons_and_later_ones_wait(monkeypatch):
    monkeypatch.setattr(containment, "RESTART_WAIT", 30.0)
    batch = [(_Info("/x/b.zarr"), [_Piece(5, 0)])]
    assert containment.fault(batch, "cudaErrorInvalidValue", sticky=False).sticky is False
    assert not containment.poisoned()  # a non-sticky error leaves the process usable

    containment.heal_on_fault()  # as GpuReadPlugin.setup does
    guilty = containment.fault(batch, "cudaErrorIllegalAddress", sticky=True)  # returns at once
    assert containment.poisoned() and containment.first_fault() is guilty
    assert guilty.keys == ("c/5/0",) and guilty.sticky
    assert containment.fault(batch, "again", sticky=True).reason == "again"  # same thread: still guilty

    got = []
    other = [(_Info("/x/a.zarr"), [_Piece(1, 0)])]
    innocent = threading.Thread(target=lambda: got.append(containment.fault(other, "collateral", True)))
    started = time.monotonic()
    innocent.start()
    innocent.join(0.5)
    assert innocent.is_alive() and not got  # waits for the restart rather than erring
    containment.reset()  # no restart comes here: wake it
    innocent.join(5)
    assert not innocent.is_alive() and time.monotonic() - started < 5
    assert got[0].keys == ("c/1/0",) and "lost to an earlier fault" in got[0].reason


def test_without_a_healer_an_innocent_task_raises_at_once():
    batch = [(_Info("/x/b.zarr"), [_Piece(5, 0)])]
    containment.fault(batch, "cudaErrorIllegalAddress", sticky=True)
    started = time.monotonic()
    e = containment.innocent([(_Info("/x/a.zarr"), [_Piece(0, 0)])])
    assert time.monotonic() - started < 1
    assert "no worker plugin restarts this process" in e.reason and e.sticky


def test_a_faulting_block_errs_and_a_later_read_waits(tmp_path, monkeypatch):
    """In this process, on the synchronous scheduler: the faulting block raises (simulated on the CPU),
    other blocks read fine before it; once poisoned, a read task waits instead of erring."""
    ref, bad = _arrays(tmp_path)
    x = from_zarr_gpu(tmp_path / "b.zarr", chunks=CHUNKS, device="cpu")
    with faulting([bad]):
        np.testing.assert_array_equal(x[: 4 * BAD].compute(scheduler="sync"), ref[: 4 * BAD] + 1)
        assert not containment.poisoned()
        with pytest.raises(DeviceFaultError, match=rf"chunks 'c/{BAD}/0' of .*b\.zarr: cudaError") as e:
            x.compute(scheduler="sync")
    assert e.value.keys == (f"c/{BAD}/0",) and e.value.sticky
    assert containment.poisoned()

    monkeypatch.setattr(containment, "RESTART_WAIT", 30.0)
    containment.heal_on_fault()
    a = from_zarr_gpu(tmp_path / "a.zarr", chunks=CHUNKS, device="cpu")
    got = []

    def read():
        try:
            got.append(read_region(_info(tmp_path / "a.zarr"), (0, 0), CHUNKS, "cpu", False))
        except DeviceFaultError as err:
            got.append(err)

    task = threading.Thread(target=read)
    task.start()
    task.join(0.5)
    assert task.is_alive() and not got  # an innocent read waits for the restart
    containment.reset()
    task.join(5)
    assert isinstance(got[0], DeviceFaultError) and got[0].keys == ("c/0/0",)
    np.testing.assert_array_equal(a.compute(scheduler="sync"), ref)  # an unpoisoned process reads


def _info(path):
    from zarr_dask_gpu.resolve import open_array_info

    return open_array_info(str(path), None, None)


def test_the_plugin_closes_a_poisoned_worker_once_its_task_has_erred():
    from zarr_dask_gpu.distributed.plugin import GpuReadPlugin

    class Loop:
        def __init__(self):
            self.calls = []

        def add_callback(self, fn, *args):
            self.calls.append((fn, args))

    class Worker:
        address, nanny, loop = "tcp://127.0.0.1:1", None, Loop()

    plugin, worker = GpuReadPlugin(), Worker()
    plugin.setup(worker)
    plugin.teardown(worker)  # removed from a healthy worker: innocents would wait for nothing
    assert not containment._healing
    plugin.setup(worker)
    assert containment._healing
    plugin.transition("a", "executing", "error")  # an ordinary error: the process is fine
    assert not worker.loop.calls
    containment.fault([(_Info("/x/b.zarr"), [_Piece(5, 0)])], "cudaErrorIllegalAddress", sticky=True)
    plugin.transition("b", "executing", "memory")
    assert not worker.loop.calls
    plugin.transition("c", "executing", "error")  # the faulting task's error: close, once
    plugin.transition("d", "executing", "error")
    assert worker.loop.calls == [(plugin._close_poisoned, (worker,))]
    plugin.teardown(worker)  # as the close itself removes the plugin: the innocents keep waiting
    assert containment._healing


def test_a_fault_errs_its_block_alone_and_the_nanny_restarts_its_worker(tmp_path):
    """Two worker processes under nannies: the faulting block errs with DeviceFaultError naming its
    key and only it; its worker is restarted (one new address, two workers again); the blocks it held
    of a persisted array are recomputed; the damaged task is not retried, so the other worker stays."""
    ref, bad = _arrays(tmp_path)
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, connect(cluster) as client:
        client.register_plugin(FaultPlugin([bad]))  # the scheduler sets it up in a restarted worker too
        before = _workers(client)
        assert len(before) == 2
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=CHUNKS, device="cpu").persist()
        wait(x, timeout=30)
        assert {w for ws in client.who_has(x).values() for w in ws} == before  # blocks on both workers

        y = from_zarr_gpu(tmp_path / "b.zarr", chunks=CHUNKS, device="cpu")
        blocks = client.compute(list(y.to_delayed().ravel()))
        wait(blocks, timeout=60)
        assert [i for i, f in enumerate(blocks) if f.status == "error"] == [BAD]
        err = blocks[BAD].exception(timeout=10)
        assert isinstance(err, DeviceFaultError) and err.sticky
        assert err.keys == (f"c/{BAD}/0",) and f"'c/{BAD}/0'" in str(err) and "b.zarr" in str(err)
        for i, f in enumerate(blocks):
            if i != BAD:
                np.testing.assert_array_equal(f.result(timeout=30), ref[4 * i : 4 * i + 4] + 1)

        _until(lambda: len(_workers(client)) == 2 and _workers(client) != before, 60, "the restart")
        after = _workers(client)
        assert len(after & before) == 1  # one worker restarted, the other one kept
        np.testing.assert_array_equal(client.compute(x).result(timeout=60), ref)  # lost blocks recomputed

        def state(key, dask_scheduler):
            ts = dask_scheduler.tasks[key]
            return ts.state, set(ts.erred_on or ()), ts.suspicious

        st, erred_on, suspicious = client.run_on_scheduler(state, blocks[BAD].key)
        assert st == "erred" and len(erred_on) == 1 and erred_on <= before - after and suspicious == 0
        assert _workers(client) == after  # no second restart: the damaged block ran once


def test_without_a_nanny_the_faulted_worker_exits(tmp_path):
    """``dask worker --no-nanny``: the worker is closed and its process exits; nothing restarts it."""
    _, bad = _arrays(tmp_path)
    with (
        LocalCluster(n_workers=0, processes=True, dashboard_address=None) as cluster,
        connect(cluster) as client,
    ):
        cli = [sys.executable, "-m", "distributed.cli.dask_worker", cluster.scheduler_address]
        worker = subprocess.Popen(
            [*cli, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--host", "127.0.0.1"]
        )
        try:
            client.wait_for_workers(1, timeout=30)
            client.register_plugin(FaultPlugin([bad]))
            y = from_zarr_gpu(tmp_path / "b.zarr", chunks=CHUNKS, device="cpu")
            with pytest.raises(DeviceFaultError, match=f"'c/{BAD}/0'"):
                client.compute(y).result(timeout=30)
            worker.wait(timeout=30)  # the process ends
            _until(lambda: not _workers(client), 30, "the worker to leave")
        finally:
            worker.kill()
            worker.wait(timeout=30)


@pytest.mark.gpu
def test_a_real_cuda_fault_restarts_the_cuda_worker_with_a_fresh_context(tmp_path):
    """LocalCUDACluster of one worker; the fault's kernel writes through a null device pointer (a real,
    sticky cudaErrorIllegalAddress): the block raises DeviceFaultError naming its key, the nanny
    restarts the worker, and reads afterwards are right (a fresh CUDA context)."""
    import cupy

    ref, bad = _arrays(tmp_path)
    cluster = local_cluster("gpu", n_workers=1, threads_per_worker=1)
    with cluster, connect(cluster) as client:
        client.register_plugin(FaultPlugin([bad]))
        before = _workers(client)
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=CHUNKS, device="gpu").persist()
        wait(x, timeout=60)

        y = from_zarr_gpu(tmp_path / "b.zarr", chunks=CHUNKS, device="gpu").map_blocks(cupy.asnumpy)
        blocks = client.compute(list(y.to_delayed().ravel()))
        wait(blocks, timeout=120)
        assert [i for i, f in enumerate(blocks) if f.status == "error"] == [BAD]
        err = blocks[BAD].exception(timeout=10)
        assert isinstance(err, DeviceFaultError) and err.sticky, err
        assert err.keys == (f"c/{BAD}/0",) and "cudaErrorIllegalAddress" in err.reason
        for i, f in enumerate(blocks):
            if i != BAD:
                np.testing.assert_array_equal(f.result(timeout=60), ref[4 * i : 4 * i + 4] + 1)

        _until(lambda: len(_workers(client)) == 1 and _workers(client) != before, 120, "the restart")
        again = client.compute(x.map_blocks(cupy.asnumpy)).result(timeout=120)  # lost blocks recomputed
        np.testing.assert_array_equal(again, ref)
        fresh = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 1024), device="gpu", name="fresh")
        got = client.compute(fresh.map_blocks(cupy.asnumpy)).result(timeout=120)
        np.testing.assert_array_equal(got, zarr.open_array(tmp_path / "a.zarr", mode="r")[...])
