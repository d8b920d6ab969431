import dask
import numpy as np
import pytest

from zarr_dask_gpu.device import gpu_available

DEVICES = [
    "cpu",
    pytest.param("gpu", marks=pytest.mark.gpu),
    pytest.param("gpu-kvikio", marks=pytest.mark.gpu),
]


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


def host(x):
    """A numpy copy of a numpy or cupy array."""
    return x.get() if hasattr(x, "get") else np.asarray(x)


def sample(shape, dtype, seed=0):
    """Random values of any numeric dtype, with some repetition so codecs compress them."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dtype)
    if dtype.kind == "f":
        return np.round(rng.standard_normal(shape) * 100, 1).astype(dtype)
    real = np.round(rng.standard_normal(shape), 2)
    return (real + 1j * np.round(rng.standard_normal(shape), 2)).astype(dtype)
