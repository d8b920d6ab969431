"""The GPU backend of a read task: kvikio reads, a structure check, one nvCOMP call per batch."""

import atexit
import contextlib
import re
import threading
import time
from collections.abc import Iterator, Sequence

import cupy as cp
import numpy as np
from nvidia import nvcomp

from .. import config
from ..backends import PLACED, Slot
from ..codecs import headers
from ..codecs.logical import logical_chunk
from ..errors import ChunkDecodeError
from ..io import Staged, host_reader, place
from ..metadata import ArrayInfo
from ..plan import ChunkPiece, decode_calls, direct_offsets
from ..storage import locate
from . import blosc, remote, setup, validate
from .gather import copy_ranges
from .reader import KvikioReader

_ALGORITHMS = {"zstd": "Zstd", "gzip": "Gzip", "zlib": "Deflate", "lz4": "LZ4"}  # blosc streams too
_ALIGN = 16  # nvCOMP wants aligned inputs (Gzip/Deflate: 4 bytes); 16 covers every algorithm
_OUT_ALIGN = 256
_lock = threading.Lock()
# per thread: a CUDA stream; per stream: nvCOMP codecs (a Codec is bound to one stream and is not
# thread-safe; each stream is used by one thread). Kept in one registry, not thread-locals, so that
# they are released at exit while CUDA is still up.
_streams: dict[tuple[int, int], cp.cuda.Stream] = {}  # per (thread, device)
_codecs: dict[tuple[int, str, str], nvcomp.Codec] = {}
_held: dict[int, list[object]] = {}  # per thread: nvCOMP batches whose decode may still run
_idle: dict[int, cp.cuda.Stream] = {}  # per device: the stream nvCOMP's batches name (_Interface)


@atexit.register
def _release() -> None:
    with _lock:
        for dev in {d for _, d in _streams}:  # every device used
            cp.cuda.Device(dev).synchronize()
        _codecs.clear()
        _streams.clear()
        _held.clear()
        _idle.clear()


class GpuBackend:
    """Reads and decodes a block's chunks into device memory, on this thread's own CUDA stream.

    Each thread that runs tasks gets its own stream and codecs, so tasks on different threads read,
    decode and assemble concurrently. A task ends by waiting for its stream, polling so that
    the GIL stays free, and the block it returns is complete on any stream.
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
        stream = self._stream()
        try:
            with stream:
                yield
        finally:
            done = stream.record()
            while not done.done:  # poll with the GIL released: other threads keep launching work
                time.sleep(0.0002)
            _held.pop(threading.get_ident(), None)  # see _keep

    @staticmethod
    def _keep(*objects: object) -> None:
        """Hold nvCOMP's batches until the task's stream has passed their decode.

        On the H200, 16 x 32-chunk decodes from 16 threads took 0.19 s where the batches lived
        until the decode had run and 2.0 s (one after another) where they were dropped right after
        the launch; every other difference was ruled out (benchmarks/probe_bisect.py). So a batch
        dropped while its decode runs is taken to wait for it, holding the GIL. With this hold the
        whole pipeline's decodes overlap too (docs/performance.md).
        """
        _held.setdefault(threading.get_ident(), []).extend(objects)

    @staticmethod
    def _codec(compression: str, stream: cp.cuda.Stream) -> nvcomp.Codec:
        policy = config.get("nvcomp-policy")
        key = (stream.ptr, compression, policy)
        with _lock:  # guards the registry (concurrent creation itself is safe: probe_threads.py)
            if key not in _codecs:
                _codecs[key] = nvcomp.Codec(
                    algorithm=_ALGORITHMS[compression],
                    bitstream_kind=nvcomp.BitstreamKind.RAW,
                    cuda_stream=stream.ptr,
                    execution_policy=getattr(nvcomp.ExecutionPolicy, policy.upper()),
                )
            return _codecs[key]

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
                staged = self._reader.read([r for p in group for r in p.ranges], skip=skip, align=_ALIGN)
            at = 0
            for p in group:
                n = len(p.ranges)
                p.staged = Staged(staged.buffer, staged.offsets[at : at + n], staged.sizes[at : at + n])
                at += n
        merged: dict[tuple[str, int], list[_Part]] = {}  # one nvCOMP batch per compression and buffer
        for part in parts:
            if part.staged is not None and self._prepare(part):
                merged.setdefault((part.chain.compression, id(part.staged.buffer)), []).append(part)
        for (compression, _), group in merged.items():
            self._decode_merged(compression, group)
        return [part.result() for part in parts]

    def _read_remote(self, part: "_Part") -> Staged:
        with _read_slot():
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
            return [(int(which[i]), f"inner stream: {why}") for i, why in failed]

        bad = blosc.decode_batch(
            staged.buffer, offsets, sizes, expected, part.decoded, part.starts, inner_streams
        )
        part.raise_first(bad)
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
        """Structure-check whole compressed items of one ``kind`` (a compression, or ``lz4-block``
        for blosc's streams), then decode their payloads in one nvCOMP batch, item ``i`` into
        ``outs[which[i]]`` at ``out_offsets[i]``; failures as (index, reason), with nothing decoded
        when any item is damaged."""
        bad, sized = validate.check_batch(buffer, offsets, sizes, kind, out_sizes)
        if bad:
            return bad
        skip, trail = headers.skip_bytes(kind)
        payload, payload_offsets = _aligned(buffer, offsets + skip, sizes - skip - trail)
        codec = "lz4" if kind == "lz4-block" else kind
        return self._nvcomp(
            codec, payload, payload_offsets, sizes - skip - trail, outs, which, out_offsets, out_sizes, sized
        )

    def _nvcomp(
        self,
        compression: str,
        buffer: cp.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
        outs: list[cp.ndarray],
        which: np.ndarray,
        out_offsets: np.ndarray,
        out_sizes: np.ndarray,
        sized: bool,
    ) -> list[tuple[int, str]]:
        """Batched nvCOMP decodes, item ``i`` into ``outs[which[i]]``, in calls of at most
        ``decode-call-bytes`` decoded bytes; the items whose decoded size is wrong, as (index,
        reason). ``sized`` batches (every stated size checked against the metadata) decode without a
        host sync; the others let nvCOMP parse headers, then check the sizes it reports."""
        stream = self._stream()
        codec = self._codec(compression, stream)
        bad: list[tuple[int, str]] = []
        for part in decode_calls(out_sizes, config.get("decode-call-bytes")):
            src = _carve([buffer], np.zeros(len(part), dtype=np.int64), offsets[part], sizes[part])
            dst = _carve(outs, which[part], out_offsets[part], out_sizes[part])
            if sized:
                config_ = _sized_config(codec, out_sizes[part])
                self._keep(src, dst, codec.decode(src, out=dst, decompression_config=config_))
                continue
            try:
                result = codec.decode(src, out=dst)
                stream.synchronize()  # the batches name the idle stream (_carve): wait for the decode's
                got = result.buffer_sizes
            except ValueError as e:  # nvCOMP's own size check: "Output array 3 capacity ... too small"
                m = re.search(r"Output array (\d+)", str(e))
                failed = [int(part[int(m.group(1))])] if m else part.tolist()
                return [(j, f"decodes to more than {out_sizes[j]} bytes ({e})") for j in failed]
            bad += [
                (int(j), f"decoded to {g} bytes, metadata says {out_sizes[j]}")
                for j, g in zip(part, got, strict=True)
                if g != out_sizes[j]
            ]
        return bad


class _Interface:
    """Device memory as a ``__cuda_array_interface__`` (version 3) that names the idle stream.

    ``nvcomp.as_arrays`` may synchronise with the stream an interface names; cupy's name the
    current one, which can hold an earlier decode. The buffers' contents are ready in the task's
    stream order, so naming a stream that never gets work costs nothing (H200: 16 concurrent
    decodes overlapped alike, probe_bisect.py "idle-iface").
    """

    def __init__(self, ptr: int, nbytes: int, keep: object) -> None:
        self.keep = keep  # keeps the memory alive while nvCOMP's views exist
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "stream": _idle_stream().ptr,
        }


def _idle_stream() -> cp.cuda.Stream:
    with _lock:
        dev = cp.cuda.Device().id
        if dev not in _idle:
            _idle[dev] = cp.cuda.Stream(non_blocking=True)  # never given work
        return _idle[dev]


def _carve(buffers: list[cp.ndarray], which: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> object:
    """One nvCOMP batch of entries of one or several device buffers: entry ``i`` is ``sizes[i]``
    bytes at ``offsets[i]`` of ``buffers[which[i]]``.

    nvCOMP carves a batch out of one buffer by an offset table, so the entries of several are carved
    out of the address range that spans them all (one device address space), by offsets from its
    lowest address; nvCOMP touches only the entries. The batch is tied to the idle stream too; the
    decode runs on its codec's stream all the same.
    """
    ptrs = np.array([b.data.ptr for b in buffers], dtype=np.int64)
    used = np.unique(which)
    base = int(ptrs[used].min())
    end = max(int(ptrs[k]) + buffers[k].nbytes for k in used)
    span = _Interface(base, end - base, buffers)
    table = ptrs[which] + offsets - base
    return nvcomp.as_arrays(span, table.tolist(), np.asarray(sizes).tolist(), cuda_stream=_idle_stream().ptr)


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


def _sized_config(codec: nvcomp.Codec, sizes: np.ndarray) -> object:
    """A decode config with every output size given (from the metadata): decode then never syncs.
    Made afresh for each call, as in the decodes that overlapped in probe_bisect.py."""
    return codec.decompression_config(codec.compression_config(sizes.tolist()))


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
        self.ranges = locate(info, [p.coords for p in pieces])
        self.skip = headers.skip_bytes(self.chain.compression)[0] if self.chain is not None else 0
        self.chunks: list[cp.ndarray | Slot | None] | None = None  # set when finished on the host
        self.staged: Staged | None = None
        self.present = np.zeros(0, dtype=np.int64)
        self.placed = False
        self.offsets = self.sizes = self.starts = np.zeros(0, dtype=np.int64)
        self.decoded: cp.ndarray | None = None

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
