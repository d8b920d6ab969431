"""Chunks the GPU path decodes on the host with the reference libraries (``codecs/reference.py``), on
the process's pool of ``cpu-threads`` (the libraries free the GIL), each result copied to the device
once: whole blocks of the compressions whose row's decoder is the host (gzip, zlib), read into
pinned memory and never to the device and back (``start``); and the device-resident items a
device decoder leaves to the host (blosc's zlib streams, zstd windows over 128 MiB, the items the
device decoders refuse: ``decode``)."""

from concurrent.futures import Future
from concurrent.futures import wait as wait_all

import cupy as cp
import cupyx
import numpy as np

from ...backends import decode_pool
from ...codecs.compressions import decode_into
from ..batch import Batch
from ..runtime.sync import wait


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


def pinned(n: int) -> np.ndarray:
    """``n`` bytes of pinned host memory (at least one): DMA copies from it run asynchronously."""
    return cupyx.empty_pinned(max(n, 1), dtype=np.uint8)


class PendingDecode:
    """A batch's chunks decoding on the pool (``start``), each copied to the device on the task's
    stream as soon as it is decoded. ``result()`` waits for them."""

    def __init__(self, batch: Batch, image: np.ndarray, futures: list[Future[str | None]]) -> None:
        self.batch, self.image, self.futures = batch, image, futures

    def result(self) -> np.ndarray:
        """Wait for the decodes; returns the pinned image they decoded into, which the caller holds
        until its stream has passed the copies.

        Raises
        ------
        ChunkDecodeError
            A chunk is damaged (the reference library's verdict); the message names the first one's key.
        """
        whys = [f.result() for f in self.futures]
        self.batch.raise_first([(j, why) for j, why in enumerate(whys) if why])
        return self.image

    def settle(self) -> None:
        """Wait for every decode, whatever became of it: none may copy to the device once the task
        has stopped waiting for its stream (its buffers may then be another task's)."""
        wait_all(self.futures)


def start(b: Batch, stored: np.ndarray) -> PendingDecode:
    """Start decoding a batch's present chunks, read into host memory ``stored`` (at ``b.offsets``,
    of ``b.sizes`` bytes), on the pool: chunk ``j`` into a pinned image at ``j * b.expected``, then
    copied to ``b.decoded`` at ``b.starts[j]`` on the current stream."""
    assert b.decoded is not None
    n, view, rt = b.expected, memoryview(stored), cp.cuda.runtime
    image = pinned(n * len(b.offsets))
    stream, base, device = cp.cuda.get_current_stream().ptr, b.decoded.data.ptr, b.decoded.device

    def one(j: int) -> str | None:
        at = int(b.offsets[j])
        why = decode_into(b.chain.compression, view[at : at + int(b.sizes[j])], image[j * n : (j + 1) * n])
        if why is None:  # from pinned memory: asynchronous, overlapping the other chunks' decodes
            with device:  # a pool thread's current device is the first, not necessarily the task's
                rt.memcpyAsync(
                    base + int(b.starts[j]), image.ctypes.data + j * n, n, rt.memcpyHostToDevice, stream
                )
        return why

    pool = decode_pool()
    return PendingDecode(b, image, [pool.submit(one, j) for j in range(len(b.offsets))])


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
    stream. The items are copied to pinned memory, decoded on the pool, and copied back. Failures as
    (index, reason), with that item left unwritten."""
    rt = cp.cuda.runtime
    ins = np.concatenate([[0], np.cumsum(src_sizes, dtype=np.int64)])
    outs = np.concatenate([[0], np.cumsum(dst_sizes, dtype=np.int64)])
    host_in, host_out = pinned(int(ins[-1])), pinned(int(outs[-1]))
    for i in range(len(src)):
        rt.memcpyAsync(
            host_in.ctypes.data + int(ins[i]),
            int(src[i]),
            int(src_sizes[i]),
            rt.memcpyDeviceToHost,
            stream.ptr,
        )
    wait(stream)
    view = memoryview(host_in)

    def one(i: int) -> str | None:
        return decode_into(compression, view[ins[i] : ins[i + 1]], host_out[outs[i] : outs[i + 1]])

    whys = list(decode_pool().map(one, range(len(src))))
    for i, why in enumerate(whys):
        if why is None:
            rt.memcpyAsync(
                int(dst[i]),
                host_out.ctypes.data + int(outs[i]),
                int(dst_sizes[i]),
                rt.memcpyHostToDevice,
                stream.ptr,
            )
    wait(stream)  # the pinned buffers go when this returns
    return Decoded([(i, why) for i, why in enumerate(whys) if why])
