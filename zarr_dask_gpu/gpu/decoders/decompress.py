"""The GPU path's decoders of whole items in one table (``DECODERS``: this package's kernels, the
reference library on the host, nvCOMP), the ``*-decoder`` settings applied in one place
(``decoder``), and nvCOMP's batched C API (libnvcomp, through ctypes).

nvCOMP's Python ``Codec`` sizes its scratch from the chunk sizes alone and keeps it for its next
call, per thread; the C API's query reads the compressed data and asks about half as much
(docs/design.md). Here the scratch comes from the caller's allocator (cupy's pool, or RMM's through
cupy) on the task's stream and goes back to it after the call, and nvCOMP's per-chunk statuses and
decoded sizes come back for the caller to check.
"""

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import cupy as cp
import numpy as np

from ... import config
from ...codecs import compressions
from ...codecs.compressions import Decoder
from ..runtime import transfer
from ..runtime.sync import wait
from . import host_decode, inflate, zstd_blocks

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
    name = compressions.get(compression).nvcomp
    query = getattr(lib, f"nvcompBatched{name}DecompressGetTempSizeSync")
    query.argtypes = [_P, _P, _SZ, _SZ, ctypes.POINTER(_SZ), _SZ, _Opts, _P, _P]
    run = getattr(lib, f"nvcompBatched{name}DecompressAsync")
    run.argtypes = [_P, _P, _P, _P, _SZ, _P, _SZ, _P, _Opts, _P, _P]
    query.restype = run.restype = ctypes.c_int
    return query, run


class Decode:
    """One launched batch: what nvCOMP reports into (decoded sizes, then statuses) and the device memory
    it uses, held until the report is read once the stream has run."""

    def __init__(self, n: int, expected: np.ndarray, stream: cp.cuda.Stream) -> None:
        self.expected, self.stream = expected, stream
        self.report = cp.zeros(n * 12, dtype=np.uint8)  # n size_t, then n nvcompStatus_t (int)
        self.failed_to_start: list[tuple[int, str]] = []
        self.held: tuple[cp.ndarray | np.ndarray, ...] = ()

    def failures(self) -> list[tuple[int, str]]:
        """The chunks nvCOMP did not decode to their expected size, as (index, reason); call once the
        stream has passed the decode."""
        if self.failed_to_start:
            return self.failed_to_start
        n = len(self.expected)
        report = transfer.read(self.report, self.stream)
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


def decoder(compression: str) -> Decoder:
    """Who decodes ``compression`` (its row's ``decoder``: nvCOMP 6.0
    is not hardened against damaged frames, so it gets only what a device walk has proven sound,
    docs/design.md); ``zstd-decoder: nvcomp`` hands zstd to nvCOMP, for trusted data only;
    ``deflate-decoder: kernels`` hands gzip and zlib to this package's inflate kernel."""
    if compression == "zstd" and config.choice("zstd-decoder") == "nvcomp":
        return Decoder.NVCOMP
    if compression in inflate.WRAPPERS and config.choice("deflate-decoder") == "kernels":
        return Decoder.KERNELS
    return compressions.get(compression).decoder


def nvcomp(
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
    done = Decode(n, dst_sizes, stream)
    query, run = _api(compression)
    tables, pinned = transfer.upload((src, src_sizes, dst, dst_sizes), np.uint64)  # one copy
    ptr = tables.data.ptr
    src_p, src_n, dst_p, dst_n = (ptr + k * n * 8 for k in range(4))
    got, statuses = done.report.data.ptr, done.report.data.ptr + n * 8
    scratch = _SZ()
    most, total = int(dst_sizes.max()), int(dst_sizes.sum())
    s = query(src_p, src_n, n, most, ctypes.byref(scratch), total, _Opts(), statuses, stream.ptr)
    if s != 0:  # headers nvCOMP cannot parse (their statuses say which); no decode is launched
        parsed = transfer.read(done.report[8 * n :].view(np.int32), stream)
        which = np.flatnonzero(parsed) if parsed.any() else range(n)
        done.failed_to_start = [(int(i), f"nvCOMP cannot parse it (status {s})") for i in which]
        return done
    temp = cp.empty(max(scratch.value, 1), dtype=np.uint8)
    s = run(src_p, src_n, dst_n, got, n, temp.data.ptr, temp.nbytes, dst_p, _Opts(), statuses, stream.ptr)
    if s != 0:
        done.failed_to_start = [(i, f"nvCOMP did not start the decode (status {s})") for i in range(n)]
    done.held = (tables, pinned, temp)
    return done


class Launched(Protocol):
    """A batch of items launched on a stream, as every decoder returns it."""

    def failures(self) -> list[tuple[int, str]]:
        """The items not decoded to their size, as (index, reason); call once the stream has passed
        the launch."""
        ...


class Launch(Protocol):
    """A decoder's launch: item ``i`` (``src_sizes[i]`` bytes at device address ``src[i]``) into
    exactly ``dst_sizes[i]`` bytes at device address ``dst[i]``, in one batch on ``stream`` (the
    current stream)."""

    def __call__(
        self,
        compression: str,
        src: np.ndarray,
        src_sizes: np.ndarray,
        dst: np.ndarray,
        dst_sizes: np.ndarray,
        stream: cp.cuda.Stream,
    ) -> Launched: ...


@dataclass(frozen=True)
class ItemDecoder:
    """A decoder of whole compressed items on the GPU path, and what the backend owes it.

    Attributes
    ----------
    launch
        Its batched launch.
    hardened
        Bounded on any bytes, and its failures are the reference library's verdict (it hands what it
        refuses to the host itself). A decoder that is not (nvCOMP) gets only items a device walk has
        proven sound (``validate``), their payloads aligned, and what it refuses is judged after.
    """

    launch: Launch
    hardened: bool


def on_host(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
) -> Callable[[np.ndarray], list[tuple[int, str]]]:
    """The reference library's verdict on items ``which`` of a batch (decoded in place where it
    can), as (index, reason) of those it cannot decode: the kernels' fallback."""

    def judge(which: np.ndarray) -> list[tuple[int, str]]:
        done = host_decode.decode(
            compression, src[which], src_sizes[which], dst[which], dst_sizes[which], stream
        )
        return [(int(which[j]), why) for j, why in done.failures()]

    return judge


def _kernels(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
) -> Launched:
    """This package's kernels: zstd by zstd block, gzip and zlib by the inflate kernel; the items they
    refuse or do not take by the reference library on the host."""
    fallback = on_host(compression, src, src_sizes, dst, dst_sizes, stream)
    if compression in inflate.WRAPPERS:
        return inflate.launch(compression, src, src_sizes, dst, dst_sizes, stream, fallback)
    return zstd_blocks.launch(
        src, src_sizes, dst, dst_sizes, stream, fallback, config.flag("verify-checksums")
    )


def _host(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
) -> Launched:
    """The reference library on the host's cores (``host_decode.decode``, looked up at each call)."""
    return host_decode.decode(compression, src, src_sizes, dst, dst_sizes, stream)


DECODERS: dict[Decoder, ItemDecoder] = {  # the decoders of whole items; blosc's frames are the backend's
    Decoder.KERNELS: ItemDecoder(_kernels, hardened=True),
    Decoder.HOST: ItemDecoder(_host, hardened=True),
    Decoder.NVCOMP: ItemDecoder(nvcomp, hardened=False),
}


def item_decoder(compression: str) -> ItemDecoder:
    """The decoder of ``compression``'s items (``decoder``'s choice)."""
    return DECODERS[decoder(compression)]


def launch(
    compression: str,
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
) -> Launched:
    """Decode item ``i`` (``src_sizes[i]`` bytes at device address ``src[i]``) into ``dst_sizes[i]``
    bytes at device address ``dst[i]``, in one batch on ``stream`` (the current stream), by the
    decoder ``decoder(compression)`` names."""
    return item_decoder(compression).launch(compression, src, src_sizes, dst, np.asarray(dst_sizes), stream)


@dataclass
class Batch:
    """One task's items for ``decode_joined``: item ``i`` decodes ``src_sizes[i]`` bytes at device address
    ``src[i]`` into ``dst_sizes[i]`` bytes at ``dst[i]``; ``calls`` splits the items into consecutive
    calls (``decode-call-bytes``), and the inputs are ready once ``ready`` has passed on its stream."""

    src: np.ndarray
    src_sizes: np.ndarray
    dst: np.ndarray
    dst_sizes: np.ndarray
    calls: list[np.ndarray]
    ready: cp.cuda.Event


def decode_joined(
    compression: str, batches: Sequence[Batch], stream: cp.cuda.Stream
) -> list[list[tuple[int, str]]]:
    """Decode several tasks' batches together on ``stream``: call ``k`` holds every batch's ``k``-th
    call, each call is waited for (the GIL released), and each batch gets its failures as (index into
    the batch, reason)."""
    for b in batches:
        stream.wait_event(b.ready)
    bad: list[list[tuple[int, str]]] = [[] for _ in batches]
    with stream:
        for k in range(max(len(b.calls) for b in batches)):
            parts = [(i, b.calls[k]) for i, b in enumerate(batches) if k < len(b.calls)]

            def joined(field: str, parts: list = parts) -> np.ndarray:
                return np.concatenate([getattr(batches[i], field)[p] for i, p in parts])

            done = launch(
                compression, joined("src"), joined("src_sizes"), joined("dst"), joined("dst_sizes"), stream
            )
            wait(stream)
            starts = np.cumsum([0] + [len(p) for _, p in parts])
            for j, why in done.failures():
                at = int(np.searchsorted(starts, j, side="right")) - 1
                i, p = parts[at]
                bad[i].append((int(p[j - starts[at]]), why))
    return bad
