"""The GPU backend of a read task: kvikio reads, a structure check, one nvCOMP call per batch."""

import atexit
import contextlib
import functools
import threading
from collections.abc import Iterator, Sequence

import cupy as cp
import numpy as np
from dask.utils import parse_timedelta

from .. import config, containment
from ..backends import PLACED, Slot
from ..coalesce import Coalescer
from ..codecs import headers
from ..codecs.logical import logical_chunk
from ..errors import ChunkDecodeError
from ..io import Staged, host_reader, place
from ..metadata import ArrayInfo
from ..plan import ChunkPiece, decode_calls, direct_offsets
from ..storage import locate
from . import blosc, decompress, faults, host_decode, phases, remote, setup, validate
from .gather import copy_ranges
from .reader import KvikioReader

_ALIGN = 16  # nvCOMP wants aligned inputs (Gzip/Deflate: 4 bytes); 16 covers every algorithm
_OUT_ALIGN = 256
_lock = threading.Lock()
# per thread and device: a CUDA stream. Kept in one registry, not thread-locals, so that they are
# released at exit while CUDA is still up.
_streams: dict[tuple[int, int], cp.cuda.Stream] = {}
# per task thread: the staging buffers its stream reads, kept until the task's wait (cupy's pool of
# pinned host memory, unlike its device pool, is not stream-ordered)
_held = threading.local()
_coalescers: dict[int, Coalescer] = {}  # per device
_joining: dict[int, list[cp.cuda.Stream]] = {}  # per device: idle streams for joined nvCOMP calls


@atexit.register
def _release() -> None:
    with _lock:
        if not containment.poisoned():  # a context lost to a sticky fault has nothing left to run
            for dev in {d for _, d in _streams}:  # every device used
                cp.cuda.Device(dev).synchronize()
        _streams.clear()
        _joining.clear()


class GpuBackend:
    """Reads and decodes a block's chunks into device memory, on this thread's own CUDA stream.

    Each thread that runs tasks gets its own stream, so tasks on different threads read,
    decode and assemble concurrently. A task ends by waiting for its stream, asleep on an event
    without the GIL, and the block it returns is complete on any stream.
    """

    xp = cp

    def __init__(self) -> None:
        setup.configure()
        self._reader = KvikioReader()

    @staticmethod
    def _stream() -> cp.cuda.Stream:
        tid = threading.get_ident()
        with _lock:
            key = (tid, cp.cuda.Device().id)  # a stream belongs to one device
            if key not in _streams:
                _streams[key] = cp.cuda.Stream(non_blocking=True)
            return _streams[key]

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        _held.buffers = []
        try:  # CUDA errors of the task, to its stream's wait, raise DeviceFaultError (faults.py)
            with phases.record("task"), faults.settled(self._stream) as stream, stream:
                yield
        finally:
            _held.buffers = []

    def decode(
        self, info: ArrayInfo, pieces: Sequence[ChunkPiece], out: cp.ndarray
    ) -> list[cp.ndarray | Slot | None]:
        """Device arrays of each piece's whole chunk (None where it is missing), or ``PLACED``: when
        every present chunk can (whole and contiguous in the block, a plain chain, aligned offsets),
        nvCOMP decodes them straight into the block ``out`` and no scratch of its size is needed."""
        return self.decode_many([(info, pieces, out)])[0]

    def decode_many(
        self, blocks: Sequence[tuple[ArrayInfo, Sequence[ChunkPiece], cp.ndarray]]
    ) -> list[list[cp.ndarray | Slot | None]]:
        """``decode`` of several blocks (of one array or several) at once: the local chunks of all
        are read in one batch of preads, and their chunks of one compression checked and decoded in
        one nvCOMP batch (``load_state_dict`` reads many tensors in one task so)."""
        with faults.batch(blocks):  # CUDA errors name these blocks' chunks; the test hook's fault
            return self._decode_many(blocks)

    def _decode_many(
        self, blocks: Sequence[tuple[ArrayInfo, Sequence[ChunkPiece], cp.ndarray]]
    ) -> list[list[cp.ndarray | Slot | None]]:
        with _coalescer().member() if _coalescing() else contextlib.nullcontext():
            parts = [_Part(info, pieces, out) for info, pieces, out in blocks]
            together: dict[int, list[_Part]] = {}  # header bytes to skip: local parts read in one batch
            for part in parts:
                if part.chain is None:  # a chain the GPU cannot decode: zarr-python on the host, then copy
                    part.chunks = _on_host(part.info, part.pieces, part.ranges)
                elif part.info.remote:
                    part.staged = self._read_remote(part)
                else:
                    together.setdefault(part.skip, []).append(part)
            for skip, group in together.items():
                with _read_slot():
                    ranges = [r for p in group for r in p.ranges]
                    with phases.record("read", chunks=len(ranges)):
                        staged = self._reader.read(ranges, skip=skip, align=_ALIGN)
                getattr(_held, "buffers", []).append(staged.buffer)
                at = 0
                for p in group:
                    n = len(p.ranges)
                    p.staged = Staged(staged.buffer, staged.offsets[at : at + n], staged.sizes[at : at + n])
                    at += n
            return self._decode_parts(parts)

    def _decode_parts(self, parts: list["_Part"]) -> list[list[cp.ndarray | Slot | None]]:
        merged: dict[tuple[str, int], list[_Part]] = {}  # one nvCOMP batch per compression and buffer
        for part in parts:
            if part.staged is not None and self._prepare(part):
                merged.setdefault((part.chain.compression, id(part.staged.buffer)), []).append(part)
        for (compression, _), group in merged.items():
            self._decode_merged(compression, group)
        return [part.result() for part in parts]

    def _read_remote(self, part: "_Part") -> Staged:
        with _read_slot(), phases.record("read", chunks=len(part.ranges)):
            if remote.use_kvikio(part.info):
                return remote.KvikioRemoteReader(part.info).read(part.ranges, skip=part.skip, align=_ALIGN)
            host = host_reader(part.info).read(part.ranges, skip=part.skip, align=_ALIGN)  # fsspec
        return Staged(cp.asarray(host.buffer), host.offsets, host.sizes)

    def _prepare(self, part: "_Part") -> bool:
        """Check what can be checked per block and choose where its chunks decode; raw and blosc
        blocks are finished here. True when the block's chunks join a merged nvCOMP batch."""
        chain, staged, info = part.chain, part.staged, part.info
        part.present = np.flatnonzero(staged.present)
        if not len(part.present):
            return False
        expected = part.expected
        offsets, sizes = staged.offsets[part.present], staged.sizes[part.present]
        if chain.crc32c:  # the last 4 bytes are a crc32c of the rest: verify, then leave them out
            part.raise_first([(j, "shorter than its crc32c") for j in np.flatnonzero(sizes < 4)])
            if config.get("verify-checksums"):
                bad_crc = validate.crc32c_mismatches(staged.buffer, offsets, sizes)
                part.raise_first([(int(j), "crc32c checksum does not match") for j in bad_crc])
            sizes = sizes - 4
        part.offsets, part.sizes = offsets, sizes
        if chain.compression == "none":
            wrong = np.flatnonzero(sizes != expected)
            part.raise_first(
                [(j, f"raw chunk has {sizes[j]} bytes, metadata says {expected}") for j in wrong]
            )
            part.decoded, part.starts = _aligned(staged.buffer, offsets, sizes)
            return False
        into = (  # where each present chunk lies whole in the block, if the chain allows it
            direct_offsets(
                [part.pieces[i] for i in part.present], part.out.shape, info.chunks, info.dtype.itemsize
            )
            if chain.decodes_in_place(info.dtype)
            else None
        )
        part.placed = into is not None and (into >= 0).all() and not (into % _OUT_ALIGN).any()
        if part.placed:
            part.decoded, part.starts = part.out.reshape(-1).view(np.uint8), into
        else:
            step = _round_up(expected, _OUT_ALIGN)
            part.starts = np.arange(len(part.present)) * step
            part.decoded = cp.empty(max(len(part.present) * step, 1), dtype=np.uint8)
        if not chain.compression.startswith("blosc"):
            return True
        inner = chain.compression.removeprefix("blosc-")
        kind = "lz4-block" if inner == "lz4" else inner  # blosc stores bare lz4 blocks

        def inner_streams(which, src, csize, target, dst, dsize):  # type: ignore[no-untyped-def]
            one = np.zeros(len(src), dtype=np.int64)
            failed = self._check_and_decode(kind, staged.buffer, src, csize, [target], one, dst, dsize)
            frames = {int(which[i]): f"inner stream: {why}" for i, why in reversed(failed)}  # a frame once
            return sorted(frames.items())

        bad = blosc.decode_batch(
            staged.buffer, offsets, sizes, expected, part.decoded, part.starts, inner, inner_streams
        )
        if bad:  # c-blosc's verdict on the frames refused; those it decodes are placed, the rest decoded
            dst = np.uint64(part.decoded.data.ptr) + part.starts.astype(np.uint64)
            part.raise_first(
                _rescue("blosc", staged.buffer, offsets, sizes, dst, np.full(len(dst), expected), bad)
            )
            rest = np.setdiff1d(np.arange(len(offsets)), [j for j, _ in bad])
            if len(rest):
                again = blosc.decode_batch(
                    staged.buffer,
                    offsets[rest],
                    sizes[rest],
                    expected,
                    part.decoded,
                    part.starts[rest],
                    inner,
                    inner_streams,
                )
                part.raise_first([(int(rest[j]), why) for j, why in again])
        return False

    def _decode_merged(self, compression: str, group: list["_Part"]) -> None:
        """Check and decode the present chunks of blocks sharing a staging buffer in one batch."""
        counts = [len(p.present) for p in group]
        bad = self._check_and_decode(
            compression,
            group[0].staged.buffer,
            np.concatenate([p.offsets for p in group]),
            np.concatenate([p.sizes for p in group]),
            [p.decoded for p in group],
            np.repeat(np.arange(len(group)), counts),
            np.concatenate([p.starts for p in group]),
            np.concatenate([np.full(n, p.expected) for p, n in zip(group, counts, strict=True)]),
        )
        if bad:  # the first damaged block raises, naming its key
            first = np.cumsum([0, *counts])
            k = int(np.searchsorted(first, bad[0][0], side="right")) - 1
            mine = [(j - first[k], why) for j, why in bad if first[k] <= j < first[k + 1]]
            group[k].raise_first(mine)

    def _check_and_decode(
        self,
        kind: str,
        buffer: cp.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        outs: list[cp.ndarray],
        which: np.ndarray,
        out_offsets: np.ndarray,
        out_sizes: np.ndarray,
    ) -> list[tuple[int, str]]:
        """Decode whole compressed items of one ``kind`` (a compression, or ``lz4-block`` for blosc's
        streams) in one batch, item ``i`` into ``outs[which[i]]`` at ``out_offsets[i]``; failures as
        (index, reason). Items bound for nvCOMP are first proven sound on the device (``validate``),
        and those the walk or nvCOMP refuse are judged by the reference library on the host
        (``_rescue``); zstd's kernels hand theirs to libzstd themselves (``zstd_blocks``), so every
        failure returned is the reference's verdict."""
        out_sizes = np.broadcast_to(np.asarray(out_sizes, dtype=np.int64), offsets.shape)
        bases = np.array([o.data.ptr for o in outs], dtype=np.uint64)
        dst = bases[which] + out_offsets.astype(np.uint64)
        todo = np.arange(len(offsets))
        skip = trail = 0
        decoder = decompress.decoder(kind)
        if decoder == "nvcomp":
            with phases.record("check", chunks=len(offsets)):
                bad = validate.check_batch(buffer, offsets, sizes, kind, out_sizes)
            if bad:
                failed = _rescue(kind, buffer, offsets, sizes, dst, out_sizes, bad)
                if failed:
                    return failed
                todo = np.setdiff1d(todo, [j for j, _ in bad])
            skip, trail = headers.skip_bytes(kind)
        if not len(todo):
            return []
        payload, payload_offsets = _aligned(buffer, offsets[todo] + skip, sizes[todo] - skip - trail)
        codec = "lz4" if kind == "lz4-block" else kind
        with phases.record("decode", chunks=len(todo)):
            bad = [
                (int(todo[j]), why)
                for j, why in self._nvcomp(
                    codec, payload, payload_offsets, sizes[todo] - skip - trail, dst[todo], out_sizes[todo]
                )
            ]
        if decoder != "nvcomp":  # the kernels' and the host's failures are the reference's already
            return bad
        return _rescue(kind, buffer, offsets, sizes, dst, out_sizes, bad)

    def _nvcomp(
        self,
        compression: str,
        buffer: cp.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        dst: np.ndarray,
        out_sizes: np.ndarray,
    ) -> list[tuple[int, str]]:
        """Batched decodes (``decompress.launch``), item ``i`` to device address ``dst[i]``, in calls of
        at most ``decode-call-bytes`` decoded bytes, each waited for (the GIL released); the items
        that failed or decoded to a size other than ``out_sizes`` says, as (index, reason). With
        ``coalesce-decodes`` the calls join those of the device's other tasks decoding at once."""
        stream = self._stream()
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(stream)
        batch = decompress.Batch(
            src=np.uint64(buffer.data.ptr) + offsets.astype(np.uint64),
            src_sizes=sizes,
            dst=dst,
            dst_sizes=out_sizes,
            calls=decode_calls(out_sizes, config.get("decode-call-bytes")),
            ready=ready,
        )
        if _coalescing():
            # a joined call that raised (scratch too large for many tasks' chunks) is retried alone,
            # so that each task gets its own outcome
            with contextlib.suppress(Exception):
                return _coalescer().submit(
                    compression,
                    batch,
                    int(config.get("coalesce-tasks")),
                    parse_timedelta(config.get("coalesce-wait")),
                )
        return _decode_joined(compression, [batch])[0]


def _decode_joined(compression: str, batches: Sequence[decompress.Batch]) -> list[list[tuple[int, str]]]:
    """A joined call on an idle stream of the device's few: cupy's pool keeps freed memory per stream,
    so nvCOMP's scratch for many tasks, made on whichever task's stream led, would be kept once per
    task thread."""
    dev = cp.cuda.Device().id
    with _lock:
        idle = _joining.setdefault(dev, [])
        stream = idle.pop() if idle else cp.cuda.Stream(non_blocking=True)
    try:
        with phases.record("decode-call", tasks=len(batches), chunks=sum(len(b.src) for b in batches)):
            return decompress.decode_joined(compression, batches, stream)
    finally:
        with _lock:
            _joining[dev].append(stream)


def _rescue(
    kind: str,
    buffer: cp.ndarray,
    offsets: np.ndarray,
    sizes: np.ndarray,
    dst: np.ndarray,
    out_sizes: np.ndarray,
    bad: list[tuple[int, str]],
) -> list[tuple[int, str]]:
    """The reference library's verdict on the items a device decoder refused (``bad``, as (index,
    reason)): those it decodes to their size are written to ``dst`` on the host's copy, the others
    stay failures, with both reasons."""
    if not bad:
        return []
    k = np.array([j for j, _ in bad])
    src = np.uint64(buffer.data.ptr) + offsets[k].astype(np.uint64)
    host = dict(
        host_decode.decode(kind, src, sizes[k], dst[k], out_sizes[k], cp.cuda.get_current_stream()).failures()
    )
    both = [(j, why, host[i]) for i, (j, why) in enumerate(bad) if i in host]
    return [(j, why if again in why else f"{why}; {again}") for j, why, again in both]


def _coalescing() -> bool:
    return bool(config.get("coalesce-decodes"))


def _coalescer() -> Coalescer:
    """This device's coalescer: the nvCOMP calls of its tasks decoding at once, joined."""
    dev = cp.cuda.Device().id
    with _lock:
        if dev not in _coalescers:
            _coalescers[dev] = Coalescer(_decode_joined)
        return _coalescers[dev]


_slots: dict[int, threading.BoundedSemaphore] = {}


def _read_slot() -> contextlib.AbstractContextManager:
    """One of ``read-slots`` places for a task's reads (0: no limit). Fewer tasks reading at once
    finish their reads sooner and decode while the others read, rather than all reading, then all
    decoding."""
    n = int(config.get("read-slots"))
    if n <= 0:
        return contextlib.nullcontext()
    with _lock:
        return _slots.setdefault(n, threading.BoundedSemaphore(n))


def _aligned(buffer: cp.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> tuple[cp.ndarray, np.ndarray]:
    """``buffer`` and ``offsets`` with every range starting on an ``_ALIGN`` boundary: as they are when
    they already do (whole chunk files), else gathered into a new buffer (ranges inside shards)."""
    if not (offsets % _ALIGN).any():
        return buffer, offsets
    starts, total = place([int(n) for n in sizes], 0, _ALIGN)
    out = cp.empty(max(total, 1), dtype=np.uint8)
    copy_ranges(buffer, offsets, np.asarray(starts, dtype=np.int64), sizes, out)
    return out, np.asarray(starts, dtype=np.int64)


def _round_up(n: int, a: int) -> int:
    return -(-n // a) * a


class _Part:
    """One block of ``decode_many``: its array, pieces and output, and what the steps find out."""

    def __init__(self, info: ArrayInfo, pieces: Sequence[ChunkPiece], out: cp.ndarray) -> None:
        self.info, self.pieces, self.out = info, pieces, out
        self.chain = info.chain.gpu
        self.skip = headers.skip_bytes(self.chain.compression)[0] if self.chain is not None else 0
        self.chunks: list[cp.ndarray | Slot | None] | None = None  # set when finished on the host
        self.staged: Staged | None = None
        self.present = np.zeros(0, dtype=np.int64)
        self.placed = False
        self.offsets = self.sizes = self.starts = np.zeros(0, dtype=np.int64)
        self.decoded: cp.ndarray | None = None

    @functools.cached_property
    def ranges(self) -> list:
        """Where each piece's chunk is stored (``locate``: a stat per chunk file, or the shard indexes
        read). First asked inside a read slot, so that this IO, too, runs in at most ``read-slots``
        tasks at once: in all 16 at once, B's stats cost 25-98 ms a task (docs/performance.md)."""
        with phases.record("locate", chunks=len(self.pieces)):
            return locate(self.info, [p.coords for p in self.pieces])

    @property
    def expected(self) -> int:
        """A chunk's decoded bytes, out of nvCOMP."""
        return int(np.prod(self.info.chunks)) * self.chain.stored_itemsize(self.info.dtype)

    def raise_first(self, bad: list[tuple[int, str]]) -> None:
        """``ChunkDecodeError`` for the first of ``bad`` (indices into the present chunks, with
        reasons), naming its key; nothing when ``bad`` is empty."""
        if bad:
            j, reason = bad[0]
            c = self.pieces[self.present[j]].coords
            more = f" (and {len(bad) - 1} more damaged chunks in this block)" if len(bad) > 1 else ""
            raise ChunkDecodeError(
                self.info.location, self.info.chunk_key(c), self.info.chunk_label(c) + reason + more
            )

    def result(self) -> list[cp.ndarray | Slot | None]:
        if self.chunks is not None:
            return self.chunks
        chunks: list[cp.ndarray | Slot | None] = [None] * len(self.pieces)
        n = self.expected if self.chain is not None else 0
        for j, i in enumerate(self.present):
            lo = int(self.starts[j])
            chunks[i] = (
                PLACED
                if self.placed
                else logical_chunk(
                    cp, self.decoded[lo : lo + n], self.info.chunks, self.info.dtype, self.chain
                )
            )
        return chunks


def _on_host(info: ArrayInfo, pieces: Sequence[ChunkPiece], ranges: list) -> list[cp.ndarray | None]:
    """A chain the GPU cannot decode: zarr-python on the host, then a copy to the device."""
    from ..codecs.cpu import decode_chunk

    staged = host_reader(info).read(ranges)
    return [
        None
        if off < 0
        else cp.asarray(decode_chunk(info, p.coords, memoryview(staged.buffer)[off : off + n]))
        for p, off, n in zip(pieces, staged.offsets, staged.sizes, strict=True)
    ]
