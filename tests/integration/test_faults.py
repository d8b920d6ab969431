"""Faults: transient IO errors are retried, out-of-memory names the block, a killed worker's
blocks are recomputed. The cluster runs as real `dask scheduler` and `dask worker` processes."""

import errno
import os
import signal
import subprocess
import sys
import time

import dask
import numpy as np
import pytest
import zarr
from distributed import Client, wait

import zarr_dask_gpu.storage.readers as zio
from zarr_dask_gpu import BlockMemoryError, _preads, from_zarr_gpu
from zarr_dask_gpu.storage.units import Range

from ..helpers import host, sample


def _flaky_open(monkeypatch, failures):
    """Opens failing for the first ``failures`` chunk files (``c/...``) the readers open: in the native
    batch (reported as EIO, as the C reader reports a failed open) and in the retries' ``os.open``."""
    calls = {"n": 0}

    def fails(path) -> bool:
        if f"{os.sep}c{os.sep}" in str(path):
            calls["n"] += 1
            return calls["n"] <= failures
        return False

    real_open, real_batch = os.open, _preads.read

    def flaky(path, *args, **kwargs):
        if fails(path):
            raise OSError(errno.EIO, "injected transient IO error")
        return real_open(path, *args, **kwargs)

    def flaky_batch(buf, paths, offsets, sizes, starts, errors, threads):
        real_batch(buf, paths, offsets, sizes, starts, errors, threads)
        for k, path in enumerate(paths):
            if fails(path):
                errors[k] = errno.EIO

    monkeypatch.setattr(zio.os, "open", flaky)
    monkeypatch.setattr(_preads, "read", flaky_batch)
    return calls


def test_transient_io_errors_are_retried(tmp_path, monkeypatch):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(40,), chunks=(10,), dtype="i4")
    a[...] = np.arange(40)
    calls = _flaky_open(monkeypatch, 2)
    with dask.config.set({"zarr_dask_gpu.io-retry-delay": 0.001}):
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=40, device="cpu")
        np.testing.assert_array_equal(x.compute(scheduler="sync"), np.arange(40))
    assert calls["n"] > 4  # the failed opens were tried again


def test_persistent_io_errors_raise_after_the_retries(tmp_path, monkeypatch):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(4,), chunks=(4,), dtype="i4")
    a[...] = 1
    _flaky_open(monkeypatch, 100)
    retries = {"zarr_dask_gpu.io-retries": 2, "zarr_dask_gpu.io-retry-delay": 0.001}
    with dask.config.set(retries), pytest.raises(OSError, match="failed after 3 attempts"):
        from_zarr_gpu(tmp_path / "a.zarr", device="cpu").compute(scheduler="sync")


def test_out_of_memory_names_the_block(tmp_path, device):
    zarr.create_array(tmp_path / "a.zarr", shape=(2**41,), chunks=(2**30,), dtype="i1", fill_value=1)
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=2**41, device=device)  # one 2 TiB block
    with pytest.raises(BlockMemoryError, match=r"block \[\(0,\), \(2199023255552,\)\) of .*a\.zarr"):
        x.compute(scheduler="sync")
    np.testing.assert_array_equal(host(x[:3].compute()), [1, 1, 1])  # the process goes on


@pytest.fixture
def external_cluster(tmp_path):
    """`dask scheduler` and two `dask worker` processes on loopback, started and stopped here."""
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    dask_cli = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [
        subprocess.Popen(
            [
                *dask_cli,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(sched_file),
            ],
            env=env,
        )
    ]
    for _ in range(120):
        if sched_file.exists():
            break
        time.sleep(0.1)
    worker_cli = [
        sys.executable,
        "-m",
        "distributed.cli.dask_worker",
        "--scheduler-file",
        str(sched_file),
        "--nthreads",
        "1",
        "--no-dashboard",
        "--host",
        "127.0.0.1",
        "--no-nanny",
    ]
    workers = [subprocess.Popen(worker_cli, env=env) for _ in range(2)]
    procs += workers
    client = Client(scheduler_file=str(sched_file), timeout=30)
    client.wait_for_workers(2, timeout=60)
    try:
        yield client, workers
    finally:
        client.close()
        for p in procs:
            p.kill()
            p.wait(timeout=30)


def test_external_cluster_persist_spreads_and_survives_a_killed_worker(tmp_path, external_cluster):
    client, workers = external_cluster
    a = zarr.create_array(tmp_path / "a.zarr", shape=(256, 4096), chunks=(4, 4096), dtype="f8")
    ref = sample(a.shape, "f8")
    a[...] = ref
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(4, 4096), device="cpu")
    y = x.persist()
    wait(y)
    where = client.who_has(y)
    assert len(where) == x.npartitions
    assert len({addr for addrs in where.values() for addr in addrs}) == 2  # blocks on both workers
    np.testing.assert_array_equal(y.compute(), ref)

    # a worker killed in the middle of a compute: its tasks and lost blocks are recomputed
    z = (from_zarr_gpu(tmp_path / "a.zarr", chunks=(1, 4096), device="cpu", name="again") * 2).persist()
    futures = client.futures_of(z)
    while not any(f.done() for f in futures):
        time.sleep(0.005)
    workers[0].send_signal(signal.SIGKILL)
    assert not all(f.done() for f in futures)  # killed mid-compute
    np.testing.assert_array_equal(z.compute(), ref * 2)


def test_a_file_shorter_than_its_range_raises_naming_it(tmp_path):
    """A chunk file that shrank after it was located (or a shard shorter than its index says)."""
    path = tmp_path / "chunk"
    path.write_bytes(b"x" * 100)
    settings = {"zarr_dask_gpu.io-retries": 1, "zarr_dask_gpu.io-retry-delay": 0.001}
    with (
        dask.config.set(settings),
        pytest.raises(OSError, match=r"failed after 2 attempts: .*short read of .*chunk: 100 of 150"),
    ):
        zio.HostReader().read([Range(str(path), 0, 150)])


def test_no_retries_means_one_attempt(tmp_path, monkeypatch):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(4,), chunks=(4,), dtype="i4")
    a[...] = 1
    calls = _flaky_open(monkeypatch, 1)
    with (
        dask.config.set({"zarr_dask_gpu.io-retries": 0}),
        pytest.raises(OSError, match="failed after 1 attempts"),
    ):
        from_zarr_gpu(tmp_path / "a.zarr", device="cpu").compute(scheduler="sync")
    assert calls["n"] == 1
