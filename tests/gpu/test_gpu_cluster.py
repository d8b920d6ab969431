"""On the GPU machine: a LocalCUDACluster with one worker per GPU, and spilling past the device limit."""

import numpy as np
import pytest
import zarr
from distributed import wait

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.distributed.cluster import connect, local_cluster

from ..helpers import sample

pytestmark = pytest.mark.gpu


def test_one_worker_per_gpu_keeps_cupy_blocks(tmp_path):
    import cupy

    a = zarr.create_array(tmp_path / "a.zarr", shape=(512, 2048), chunks=(16, 2048), dtype="f4")
    a[...] = sample(a.shape, "f4")
    with local_cluster("gpu", threads_per_worker=4) as cluster, connect(cluster) as client:
        assert len(client.scheduler_info()["workers"]) == cupy.cuda.runtime.getDeviceCount()
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(64, 2048), device="gpu").persist()
        wait(x)  # persist returns at once on a distributed client
        kinds = client.run(
            lambda dask_worker: sorted({type(v).__module__.split(".")[0] for v in dask_worker.data.values()})
        )
        assert all(k == ["cupy"] for k in kinds.values()), kinds
        np.testing.assert_array_equal(x.map_blocks(lambda b: b.get()).compute(), a[...])


def test_persist_beyond_the_device_memory_limit_spills_and_stays_correct(tmp_path):
    a = zarr.create_array(tmp_path / "a.zarr", shape=(256, 1 << 16), chunks=(8, 1 << 16), dtype="f4")
    a[...] = sample(a.shape, "f4")  # 64 MiB, persisted against a 16 MiB device limit
    cluster = local_cluster("gpu", threads_per_worker=2, device_memory_limit="16MiB")
    with cluster, connect(cluster) as client:
        x = from_zarr_gpu(tmp_path / "a.zarr", chunks=(16, 1 << 16), device="gpu").persist()
        np.testing.assert_array_equal(x.map_blocks(lambda b: b.get()).compute(), a[...])
        spilled = client.run(lambda dask_worker: len(getattr(dask_worker.data, "host", {})))
        assert sum(spilled.values()) > 0
