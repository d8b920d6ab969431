"""Chunks on the device that no device decoder of this package takes, decoded on the host by the
reference libraries (``codecs/reference.py``) and copied back: gzip and zlib streams, the zstd
chunks the kernels refuse or leave (windows over 128 MiB), and what nvCOMP's guard refuses."""

import cupy as cp
import numpy as np

from ..codecs.compressions import decode_into
from .sync import wait


class Decoded:
    """A host decode's outcome, in the shape of the device decoders' reports."""

    def __init__(self, bad: list[tuple[int, str]]) -> None:
        self.bad = bad

    def failures(self) -> list[tuple[int, str]]:
        return self.bad


def both_reasons(device: str | None, host: str) -> str:
    """One chunk's failure reason from a device decoder's (``None``: it gave none) and the reference
    library's verdict, each said once."""
    if device is None or device in host:
        return host
    return device if host in device else f"{device}; {host}"


def decode(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
) -> Decoded:
    """Decode item ``i`` (``src_sizes[i]`` bytes at device address ``src[i]``) into exactly
    ``dst_sizes[i]`` bytes at device address ``dst[i]``, once ``stream`` has passed what it holds, and
    returns once the copies back (on ``stream``) are done: the caller may read the output on any
    stream. Failures as (index, reason), with that item left unwritten."""
    wait(stream)
    rt = cp.cuda.runtime
    bad = []
    for i in range(len(src)):
        data = np.empty(int(src_sizes[i]), np.uint8)
        rt.memcpy(data.ctypes.data, int(src[i]), data.nbytes, rt.memcpyDeviceToHost)
        out = np.empty(int(dst_sizes[i]), np.uint8)
        why = decode_into(compression, memoryview(data), out)
        if why:
            bad.append((i, why))
        else:  # pageable memory: the copy is staged before the call returns, so `out` may go
            rt.memcpyAsync(int(dst[i]), out.ctypes.data, out.nbytes, rt.memcpyHostToDevice, stream.ptr)
    wait(stream)
    return Decoded(bad)
