"""The graphs run on a distributed cluster of real worker processes."""

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import zarr
from distributed import Client, LocalCluster

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu
from zarr_dask_gpu.distributed import cluster as cluster_mod
from zarr_dask_gpu.distributed.cluster import connect, local_cluster

from ..helpers import sample


@pytest.fixture(scope="module")
def client():
    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, connect(cluster) as c:
        yield c


def test_persist_and_compute_on_worker_processes(tmp_path, client: Client):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(64, 50), chunks=(8, 25), dtype="f8", fill_value=np.nan)
    a[:40] = sample((40, 50), "f8")
    x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 50), device="cpu").persist()
    placed = client.who_has(x)
    assert len(placed) == x.npartitions
    np.testing.assert_array_equal(x.compute(), a[...])


def test_damaged_chunk_error_crosses_processes(tmp_path, client: Client):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(16,), chunks=(4,), dtype="i4")
    a[...] = np.arange(16)
    (tmp_path / "a.zarr" / "c" / "2").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(ChunkDecodeError) as e:
        from_zarr_gpu(tmp_path / "a.zarr", chunks=4, device="cpu").compute()
    assert e.value.key == "c/2"


def test_local_cluster_gives_gpu_workers_16_threads_and_the_cuda_queues(monkeypatch):
    # the arguments local_cluster hands dask-cuda on a GPU host (dask_cuda itself needs a GPU)
    seen = {}
    fake = types.SimpleNamespace(LocalCUDACluster=lambda **kw: seen.update(kw))
    monkeypatch.setitem(sys.modules, "dask_cuda", fake)
    monkeypatch.setattr(cluster_mod, "resolve_device", lambda device: "gpu")
    local_cluster(env={"X": "1"})
    assert seen["threads_per_worker"] == 16
    # the package sets 32 on import unless the environment already chose
    assert seen["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": os.environ["CUDA_DEVICE_MAX_CONNECTIONS"], "X": "1"}


def test_scaling_script_runs_on_cpu_worker_processes(tmp_path):
    # benchmarks/scaling.py as run on a multi-GPU host, on CPU workers: 1 and 2 processes, values
    # checked inside (blocks, the mean, the rechunk across workers), every block placed on a worker
    script = Path(__file__).parents[2] / "benchmarks" / "scaling.py"
    out = tmp_path / "scaling.json"
    args = ["--device", "cpu", "--sizes-gib", "0.0625", "--path", str(tmp_path / "s"), "--json", str(out)]
    variant = "cpu-threads=1,read-slots=1"  # one setting shapes the client's graph, both reach the workers
    args += ["--variants", variant]
    subprocess.run([sys.executable, str(script), *args], check=True, timeout=300, capture_output=True)
    rows = json.loads(out.read_text())
    counts = sorted({1, min(4, os.cpu_count() or 1)})
    assert [(r["workers"], r["settings"]) for r in rows] == [(n, s) for s in ("", variant) for n in counts]
    for r in rows:
        assert sum(r["blocks_per_worker"]) == r["blocks"] and len(r["blocks_per_worker"]) == r["workers"]
        assert r["gbps"] > 0 and r["efficiency"] > 0
    plain, last = rows[len(counts) - 1], rows[-1]
    assert plain["mean_max_abs_err"] < 1e-3 and plain["rechunk_s"] > 0 and "rechunk_s" not in last
    assert (last["blocks"], plain["blocks"]) == (4, 8)  # 64 MiB in 4 blocks a thread, on 1 thread
    seen = {"zarr_dask_gpu.cpu-threads": 1, "zarr_dask_gpu.read-slots": 1}
    assert last["worker_settings"] == [seen] * last["workers"]
