"""Batched decompression through nvCOMP's C API (libnvcomp, through ctypes).

nvCOMP's Python ``Codec`` sizes its scratch from the chunk sizes alone and keeps it for its next
call: 3.05x the decoded bytes for A's 8 MiB zstd chunks, held per thread. The C API's query that
reads the compressed data asks 1.49x (H200, nvCOMP 6.0.0, ``benchmarks/probe_nvcomp_c.py``); here
the scratch comes from the caller's allocator (cupy's pool, or RMM's through cupy) on the task's
stream and goes back to it after the call, and nvCOMP's per-chunk statuses and decoded sizes come
back for the caller to check. One call of A's 512 chunks decodes alike either way (135 ms).
"""

import ctypes
import functools
from collections.abc import Callable

import cupy as cp
import numpy as np

_NAMES = {"zstd": "Zstd", "gzip": "Gzip", "zlib": "Deflate", "lz4": "LZ4"}
_STATUS = {  # nvcompStatus_t (nvcomp/shared_types.h)
    10: "invalid value",
    11: "not supported",
    12: "cannot decompress",
    15: "output buffer too small",
    16: "wrong header length",
    17: "misaligned buffer",
    18: "chunk size too large",
    20: "wrong input length",
    1000: "CUDA error",
    10000: "internal error",
}
_P, _SZ = ctypes.c_void_p, ctypes.c_size_t


class _Opts(ctypes.Structure):
    """Any algorithm's decompression options (64 bytes). All zeros are nvCOMP's defaults: the backend of
    its choice (CUDA where there is no decompression engine), gzip's naive algorithm, no bitshuffle."""

    _fields_ = [("zero", ctypes.c_char * 64)]


@functools.cache
def _api(compression: str) -> tuple[Callable[..., int], Callable[..., int]]:
    """The scratch query that reads the data, and the decompression, of one algorithm."""
    from nvidia.libnvcomp import load_library

    lib = load_library()
    if lib is None:
        raise RuntimeError("libnvcomp could not be loaded (the nvidia-libnvcomp-cu13 wheel)")
    name = _NAMES[compression]
    query = getattr(lib, f"nvcompBatched{name}DecompressGetTempSizeSync")
    query.argtypes = [_P, _P, _SZ, _SZ, ctypes.POINTER(_SZ), _SZ, _Opts, _P, _P]
    run = getattr(lib, f"nvcompBatched{name}DecompressAsync")
    run.argtypes = [_P, _P, _P, _P, _SZ, _P, _SZ, _P, _Opts, _P, _P]
    query.restype = run.restype = ctypes.c_int
    return query, run


class Decode:
    """One launched batch: what nvCOMP reports into (decoded sizes, then statuses) and the device memory
    it uses, held until the report is read once the stream has run."""

    def __init__(self, n: int, expected: np.ndarray) -> None:
        self.expected = expected
        self.report = cp.zeros(n * 12, dtype=np.uint8)  # n size_t, then n nvcompStatus_t (int)
        self.failed_to_start: list[tuple[int, str]] = []
        self.held: tuple[cp.ndarray, ...] = ()

    def failures(self) -> list[tuple[int, str]]:
        """The chunks nvCOMP did not decode to their expected size, as (index, reason); call once the
        stream has passed the decode."""
        if self.failed_to_start:
            return self.failed_to_start
        n = len(self.expected)
        report = self.report.get()
        self.held = ()
        got, status = report[: 8 * n].view(np.uint64), report[8 * n :].view(np.int32)
        bad = [
            (int(i), f"nvCOMP status {status[i]} ({_STATUS.get(int(status[i]), '?')})")
            for i in np.flatnonzero(status)
        ]
        bad += [
            (int(i), f"decoded to {got[i]} bytes, metadata says {self.expected[i]}")
            for i in np.flatnonzero((status == 0) & (got != self.expected))
        ]
        return sorted(bad)


def launch(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
) -> Decode:
    """Decode chunk ``i`` (``src_sizes[i]`` bytes at device address ``src[i]``) into ``dst_sizes[i]``
    bytes at device address ``dst[i]``, in one batched call on ``stream`` (the current stream: the
    scratch is allocated on it).

    nvCOMP's scratch query reads the chunks' headers and synchronises ``stream``; the decode itself
    runs asynchronously, and the returned ``Decode`` holds its scratch until its report is read.
    """
    n = len(src)
    dst_sizes = np.asarray(dst_sizes, dtype=np.uint64)
    done = Decode(n, dst_sizes)
    query, run = _api(compression)
    tables = cp.asarray(np.concatenate([src, src_sizes, dst, dst_sizes]).astype(np.uint64))  # one copy
    ptr = tables.data.ptr
    src_p, src_n, dst_p, dst_n = (ptr + k * n * 8 for k in range(4))
    got, statuses = done.report.data.ptr, done.report.data.ptr + n * 8
    scratch = _SZ()
    most, total = int(dst_sizes.max()), int(dst_sizes.sum())
    s = query(src_p, src_n, n, most, ctypes.byref(scratch), total, _Opts(), statuses, stream.ptr)
    if s != 0:  # headers nvCOMP cannot parse (their statuses say which); no decode is launched
        parsed = done.report[8 * n :].view(np.int32).get()
        which = np.flatnonzero(parsed) if parsed.any() else range(n)
        done.failed_to_start = [(int(i), f"nvCOMP cannot parse it (status {s})") for i in which]
        return done
    temp = cp.empty(max(scratch.value, 1), dtype=np.uint8)
    s = run(src_p, src_n, dst_n, got, n, temp.data.ptr, temp.nbytes, dst_p, _Opts(), statuses, stream.ptr)
    if s != 0:
        done.failed_to_start = [(i, f"nvCOMP did not start the decode (status {s})") for i in range(n)]
    done.held = (tables, temp)
    return done
