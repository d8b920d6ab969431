"""Where blocks live: resolving ``device="auto"`` without importing GPU libraries eagerly."""

import functools
from typing import Literal

Device = Literal["gpu", "cpu"]


@functools.cache
def gpu_available() -> bool:
    """True when cupy, kvikio and nvCOMP import and a CUDA device is visible."""
    try:
        import cupy
        import kvikio  # noqa: F401
        from nvidia import libnvcomp  # noqa: F401

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # any import or driver failure means no usable GPU
        return False


def resolve_device(device: str) -> Device:
    """Map ``"auto" | "gpu" | "cpu"`` to the device blocks will live on."""
    if device == "auto":
        return "gpu" if gpu_available() else "cpu"
    if device == "gpu":
        if not gpu_available():
            raise RuntimeError("device='gpu' needs cupy, kvikio, nvidia-libnvcomp and a visible CUDA device")
        return "gpu"
    if device == "cpu":
        return "cpu"
    raise ValueError(f"device must be 'auto', 'gpu' or 'cpu', not {device!r}")
