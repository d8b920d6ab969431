"""Where blocks live: resolving ``device="auto"`` without importing GPU libraries eagerly."""

import functools
import importlib
from enum import StrEnum

from .errors import DeviceUnavailableError


class Device(StrEnum):
    """Where a read's blocks live: cupy arrays on the GPU, numpy arrays on the CPU."""

    GPU = "gpu"
    CPU = "cpu"


@functools.cache
def missing_gpu() -> str | None:
    """What keeps the GPU path from running here (a library or a device), or None when nothing does."""
    for module, name in (("cupy", "cupy"), ("kvikio", "kvikio"), ("nvidia.libnvcomp", "libnvcomp (nvCOMP)")):
        try:
            importlib.import_module(module)
        except Exception:  # an import that fails for any reason (absent, a CUDA mismatch) counts
            return f"{name} is not installed or does not import"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return None
    except Exception:
        pass
    return "no CUDA device is visible"


def gpu_available() -> bool:
    """True when cupy, kvikio and nvCOMP import and a CUDA device is visible."""
    return missing_gpu() is None


def resolve_device(device: str) -> Device:
    """Map ``"auto" | "gpu" | "cpu"`` to the device blocks will live on.

    Raises
    ------
    DeviceUnavailableError
        ``device="gpu"`` where the GPU path cannot run; the message says what is missing.
    """
    if not isinstance(device, str):
        raise TypeError(f"device must be 'auto', 'gpu' or 'cpu', not {device!r}")
    if device == "auto":
        return Device.GPU if gpu_available() else Device.CPU
    if device == "gpu":
        why = missing_gpu()
        if why:
            raise DeviceUnavailableError(
                f"device='gpu' cannot run here: {why}; install the gpu extra "
                '(pip install "zarr-dask-gpu[gpu]") or read on the CPU (device="cpu", --device cpu)'
            )
        return Device.GPU
    if device == "cpu":
        return Device.CPU
    raise ValueError(f"device must be 'auto', 'gpu' or 'cpu', not {device!r}")
