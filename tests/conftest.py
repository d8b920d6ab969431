"""Fixtures, hooks and markers for every test folder; the helpers test modules import are in helpers.py."""

import os

import dask
import pytest

from zarr_dask_gpu.device import gpu_available

DEVICES = [
    "cpu",
    pytest.param("gpu", marks=pytest.mark.gpu),
    pytest.param("gpu-kvikio", marks=pytest.mark.gpu),
]


def pytest_configure(config):
    if os.environ.get("ZDG_CUPY_POOL") == "0":  # compute-sanitizer: each buffer its own allocation
        import cupy

        cupy.cuda.set_allocator(None)
        cupy.cuda.set_pinned_memory_allocator(None)


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU with cupy, kvikio and nvCOMP")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=DEVICES)
def device(request):
    """The device a test reads on. "gpu-kvikio" is the GPU with every local read a kvikio device
    pread into device staging; on "gpu", with the default
    settings, small reads (most tests' chunks) go through pinned host memory (host-read-below)."""
    if request.param == "gpu-kvikio":
        with dask.config.set({"zarr_dask_gpu.host-read-below": 0, "zarr_dask_gpu.staging": "device"}):
            yield "gpu"
    else:
        yield request.param
