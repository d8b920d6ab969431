"""A local dask cluster for this workload: one worker per GPU with dask-cuda, else CPU processes."""

import os
from typing import Any

from distributed import Client, LocalCluster

from ..device import resolve_device
from .plugin import GpuReadPlugin


def local_cluster(device: str = "auto", threads_per_worker: int = 16, **kwargs: Any) -> LocalCluster:
    """Start ``LocalCUDACluster`` (one worker per visible GPU) on a GPU host, else a ``LocalCluster``.

    Parameters
    ----------
    device
        "auto", "gpu" or "cpu", as in ``from_zarr_gpu``.
    threads_per_worker
        Tasks a GPU worker runs at once; each thread decodes on its own CUDA stream, so more threads
        overlap more reads and decodes (docs/performance.md). CPU workers get one process with a
        thread per core.
    kwargs
        Passed to the cluster class.
    """
    if resolve_device(device) == "gpu":
        from dask_cuda import LocalCUDACluster

        env = {"CUDA_DEVICE_MAX_CONNECTIONS": os.environ["CUDA_DEVICE_MAX_CONNECTIONS"]}  # see __init__
        return LocalCUDACluster(
            threads_per_worker=threads_per_worker, env=env | kwargs.pop("env", {}), **kwargs
        )
    kwargs.setdefault("n_workers", 1)
    kwargs.setdefault("threads_per_worker", os.cpu_count() or 1)
    kwargs.setdefault("dashboard_address", None)
    return LocalCluster(**kwargs)


def connect(cluster: LocalCluster) -> Client:
    """A client of ``cluster`` whose workers run this package's set-up plugin."""
    client = Client(cluster)
    client.register_plugin(GpuReadPlugin())
    return client
