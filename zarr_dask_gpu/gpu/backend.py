"""The GPU backend of a read task: kvikio reads into device memory, then each compression's batch
decoded where its row in ``codecs.compressions`` says (this package's kernels, nvCOMP after a
device walk, or the reference library on the host), the reference judging what a device decoder
refuses. Streams (``streams``), read slots (``slots``), joined decode calls (``joined``) and a
block's read chunks (``batch.Batch``) live in modules of their own."""

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence

import cupy as cp
import cupyx
import numpy as np

from .. import config, phases
from ..backends import host_block
from ..codecs import compressions
from ..codecs.compressions import Decoder
from ..metadata import ArrayInfo
from ..phases import Phase
from ..plan import BlockRequest, ChunkPiece, decode_calls, read_groups
from ..storage.readers import Staged, host_reader
from ..storage.stores import DeviceReader
from ..storage.units import Range, Source, locate
from .batch import ALIGN, Batch, expected_bytes
from .decoders import blosc, decompress, host_decode, joined, validate
from .decoders.items import Items
from .readers import remote
from .readers.local import KvikioReader, upload
from .runtime import faults, setup
from .runtime.gather import aligned
from .runtime.slots import read_slot
from .runtime.streams import task_stream

# per task thread: the staging buffers its stream reads, kept until the task's wait (cupy's pool of
# pinned host memory, unlike its device pool, is not stream-ordered)
_held = threading.local()


class GpuBackend:
    """Reads and decodes a block's chunks into device memory, on this thread's own CUDA stream.

    Each thread that runs tasks gets its own stream, so tasks on different threads read,
    decode and assemble concurrently. A task ends by waiting for its stream, asleep on an event
    without the GIL, and the block it returns is complete on any stream.
    """

    xp = cp

    def __init__(self) -> None:
        setup.configure()
        self._reader = KvikioReader()  # local files, into device or pinned memory

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        _held.buffers = []
        try:  # CUDA errors of the task, to its stream's wait, raise DeviceFaultError (runtime/faults.py)
            with phases.record(Phase.TASK), faults.settled(task_stream) as stream, stream:
                yield
        finally:
            _held.buffers = []

    def decode_many(self, blocks: Sequence[BlockRequest]) -> list[tuple[cp.ndarray, list[bool]]]:
        """Each block made once its chunks are read, each stored chunk's
        part put into it, and per piece whether its chunk is stored (``Backend.decode_many``). The
        local chunks of all blocks are read in one batch of preads, and their chunks of one
        compression checked and decoded in one batch (``load_state_dict`` reads many tensors in one
        task so); where every present chunk of a block can (whole and contiguous in it, a plain
        chain, aligned offsets), they decode straight into the block and no scratch of its size is
        needed. The local blocks are made once their reads are under way: their allocation overlaps
        the reads, and the tasks waiting for a read slot hold none (docs/decisions/allocation.md)."""
        # CUDA errors name these blocks' chunks (and the test hook's fault); coalescing: a member
        with faults.batch(blocks), joined.member():
            return self._decode_many(blocks)

    def _decode_many(self, blocks: Sequence[BlockRequest]) -> list[tuple[cp.ndarray, list[bool]]]:
        results: list[tuple[cp.ndarray, list[bool]] | None] = [None] * len(blocks)
        staged: dict[int, Staged] = {}
        # by header bytes to skip and the store fetching what is not in local files: one batch each
        local: dict[tuple[int, int], list[int]] = {}
        for k, (info, pieces, make) in enumerate(blocks):
            chain = info.chain.gpu
            if chain is None:  # a chain the GPU cannot decode: zarr-python on the host, then copied
                out = make()
                results[k] = (out, _on_host(info, pieces, out))
                continue
            row = compressions.get(chain.compression)
            host = compressions.on_host(row, expected_bytes(info, chain))
            if host and decompress.decoder(row.name) != Decoder.KERNELS:  # the rest of the chain here
                results[k] = _decoded_on_host(info, pieces, make)
                continue
            skip = row.skip
            reader = remote.device_reader(info)  # the store's choice: local files are batched
            if reader == DeviceReader.CUFILE:
                local.setdefault((skip, id(info.store.fetcher)), []).append(k)
            else:
                staged[k] = self._read_remote(info, pieces, skip, reader)
        made: dict[int, cp.ndarray] = {}  # local blocks, made while their reads are in flight
        for (skip, _), ks in local.items():
            for k, (out, st) in zip(ks, self._read_local([blocks[k] for k in ks], skip), strict=True):
                made[k], staged[k] = out, st
        batches = {
            k: Batch.of(
                blocks[k].info, blocks[k].pieces, made[k] if k in made else blocks[k].make(), staged[k]
            )
            for k in sorted(staged)
        }
        merged: dict[tuple[str, int], list[Batch]] = {}  # one decode batch per compression and buffer
        for b in batches.values():
            row = compressions.get(b.chain.compression)
            if not len(b.present) or row.decoder == Decoder.NONE:
                continue
            if row.blosc is not None:
                self._decode_blosc(b, row)
            else:
                merged.setdefault((row.name, id(b.buffer)), []).append(b)
        for (compression, _), group in merged.items():
            self._decode_merged(compression, group)
        for k, b in batches.items():
            results[k] = (b.out, b.assemble())
        return results  # type: ignore[return-value]  # every block has its result now

    def _read_local(self, blocks: Sequence[BlockRequest], skip: int) -> list[tuple[cp.ndarray, Staged]]:
        """Local blocks' chunks in one batch of preads, and the blocks, made once the reads are under
        way (``KvikioReader.submit``) so that their allocation overlaps them. The chunks are located
        inside the read slot, so that this IO, too, runs in at most ``read-slots`` tasks at once
        (over many small files, their stats are much of the IO: docs/decisions/local-reads.md). Where
        a store places some of them elsewhere than in local files (Icechunk's inline chunks, say),
        the batch goes the host's way."""
        with read_slot():
            ranges = [_locate(b.info, b.pieces) for b in blocks]
            flat = [r for rs in ranges for r in rs]
            with phases.record(Phase.READ, chunks=len(flat)):
                if all(r is None or r.source is Source.FILE for r in flat):
                    with self._reader.submit(flat, skip=skip, align=ALIGN) as pending:
                        made = [b.make() for b in blocks]
                        staged = pending.result()
                else:
                    made = [b.make() for b in blocks]
                    staged = _by_host(blocks[0].info, flat, skip)
        getattr(_held, "buffers", []).append(staged.buffer)
        out, at = [], 0
        for block, rs in zip(made, ranges, strict=True):
            n = len(rs)
            out.append((block, Staged(staged.buffer, staged.offsets[at : at + n], staged.sizes[at : at + n])))
            at += n
        return out

    def _read_remote(
        self, info: ArrayInfo, pieces: Sequence[ChunkPiece], skip: int, reader: DeviceReader
    ) -> Staged:
        """A block of a store read by kvikio.RemoteFile, or by its host reader into pinned memory and
        then copied to the device, as the store's ``device_reader`` named."""
        with read_slot():
            ranges = _locate(info, pieces)
            with phases.record(Phase.READ, chunks=len(ranges)):
                if reader == DeviceReader.REMOTE_FILE:
                    return remote.KvikioRemoteReader(info).read(ranges, skip=skip, align=ALIGN)
                return _by_host(info, ranges, skip)

    def _decode_blosc(self, b: Batch, row: compressions.Compression) -> None:
        """A block's blosc frames by this package's kernels, their inner streams by their row's
        decoder; frames the kernels refuse are judged by c-blosc, those it decodes placed."""
        inner = compressions.inner(row)
        assert row.blosc is not None and b.decoded is not None
        compcode, decoded = row.blosc.compcode, b.decoded

        def inner_streams(items: Items) -> list[tuple[int, str]]:
            failed = self._check_and_decode(inner.name, items)  # by frame
            by_frame = {frame: f"inner stream: {why}" for frame, why in reversed(failed)}  # a frame once
            return sorted(by_frame.items())

        def frames(k: np.ndarray) -> list[tuple[int, str]]:
            out = blosc.decode_batch(
                b.buffer,
                b.offsets[k],
                b.sizes[k],
                b.expected,
                decoded,
                b.starts[k],
                compcode,
                inner_streams,
            )
            return [(int(k[j]), why) for j, why in out]

        every = np.arange(len(b.offsets))
        bad = frames(every)
        if bad:  # c-blosc's verdict on the frames refused; those it decodes are placed, the rest decoded
            sizes = np.full(len(b.offsets), b.expected, dtype=np.int64)
            b.raise_first(
                _rescue(row.name, Items(b.buffer, b.offsets, b.sizes, b.out_addresses, sizes, every), bad)
            )
            rest = np.setdiff1d(np.arange(len(b.offsets)), [j for j, _ in bad])
            if len(rest):
                b.raise_first(frames(rest))

    def _decode_merged(self, compression: str, group: list[Batch]) -> None:
        """Check and decode the present chunks of blocks sharing a staging buffer in one batch."""
        counts = [len(b.present) for b in group]
        items = Items(  # owned by their place in the group's chunks, block after block
            group[0].buffer,
            np.concatenate([b.offsets for b in group]),
            np.concatenate([b.sizes for b in group]),
            np.concatenate([b.out_addresses for b in group]),
            np.concatenate(
                [np.full(n, b.expected, dtype=np.int64) for b, n in zip(group, counts, strict=True)]
            ),
            np.arange(sum(counts)),
        )
        bad = self._check_and_decode(compression, items)
        if bad:  # the first damaged block raises, naming its key
            first = np.cumsum([0, *counts])
            k = int(np.searchsorted(first, bad[0][0], side="right")) - 1
            mine = [(j - first[k], why) for j, why in bad if first[k] <= j < first[k + 1]]
            group[k].raise_first(mine)

    def _check_and_decode(self, kind: str, items: Items) -> list[tuple[int, str]]:
        """Decode whole compressed items of one ``kind`` (a row of ``compressions``) in one batch;
        failures as (owner, reason). Items bound for nvCOMP are first proven sound on the device
        (``validate``), and those the walk or nvCOMP refuse are judged by the reference library on
        the host (``_rescue``); zstd's kernels hand theirs to libzstd themselves (``zstd_blocks``), so
        every failure returned is the reference's verdict."""
        todo = items
        skip = 0
        decoder = decompress.item_decoder(kind)
        if not decoder.hardened:  # nvCOMP: only what a device walk proved sound
            with phases.record(Phase.CHECK, chunks=len(items)):
                bad = validate.check_batch(items.buffer, items.offsets, items.sizes, kind, items.out_sizes)
            if bad:
                failed = _rescue(kind, items, bad)
                if failed:
                    return failed
                todo = items.take(np.setdiff1d(np.arange(len(items)), [j for j, _ in bad]))
            skip = compressions.get(kind).skip
        if not len(todo):
            return []
        if not decoder.hardened:  # nvCOMP wants aligned inputs; the kernels and the host read any
            payload, payload_offsets = aligned(todo.buffer, todo.offsets + skip, todo.sizes - skip, ALIGN)
        else:
            payload, payload_offsets = todo.buffer, todo.offsets
        with phases.record(Phase.DECODE, chunks=len(todo)):
            got = self._nvcomp(kind, payload, payload_offsets, todo.sizes - skip, todo.dst, todo.out_sizes)
        if decoder.hardened:  # the kernels' and the host's failures are the reference's already
            return todo.owned(got)
        return _rescue(kind, todo, got)

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
        ``join-decodes`` the calls join those of the device's other tasks decoding at once."""
        ready = cp.cuda.Event(disable_timing=True)
        ready.record(task_stream())
        batch = decompress.Batch(
            src=np.uint64(buffer.data.ptr) + offsets.astype(np.uint64),
            src_sizes=sizes,
            dst=dst,
            dst_sizes=out_sizes,
            calls=decode_calls(out_sizes, config.maybe_nbytes("decode-call-bytes")),
            ready=ready,
        )
        return joined.decode(compression, batch)


def _by_host(info: ArrayInfo, ranges: Sequence[Range | None], skip: int) -> Staged:
    """Ranges read by the store's host reader into pinned memory, then copied to the device in one
    copy: the stores whose chunks are not all local files (their ``get``, fsspec requests)."""
    host = host_reader(info, empty=_pinned).read(ranges, skip=skip, align=ALIGN)
    return Staged(upload(host.buffer), host.offsets, host.sizes)


def _decoded_on_host(
    info: ArrayInfo, pieces: Sequence[ChunkPiece], make: Callable[[], cp.ndarray]
) -> tuple[cp.ndarray, list[bool]]:
    """A block of chunks the host decodes (``compressions.on_host``), made once its first are read;
    per piece, whether its chunk is stored. Its chunks are read by the store's host reader into
    pinned memory in groups of about ``_HOST_GROUP`` stored bytes (``plan.read_groups``), each
    group's decode started on the process's pool as soon as it is read (``host_decode.start``: every
    chunk copied to the device once decoded), so that reads, decodes and copies overlap; the rest of
    the chain (filters, byte order, layout) is undone on the device as for the chunks decoded there.
    The pinned buffers are held until the task's wait."""
    with read_slot():
        ranges = _locate(info, pieces)
    held = getattr(_held, "buffers", [])
    out: cp.ndarray | None = None
    started: list[tuple[list[int], Batch, host_decode.PendingDecode | None]] = []
    stored = [False] * len(pieces)
    try:
        for group in read_groups([None if r is None else r.size for r in ranges], _HOST_GROUP):
            with read_slot(), phases.record(Phase.READ, chunks=len(group)):
                staged = host_reader(info, empty=_pinned).read([ranges[i] for i in group])
            held.append(staged.buffer)
            out = make() if out is None else out
            b = Batch.of(info, [pieces[i] for i in group], out, staged)
            started.append((group, b, host_decode.start(b, staged.buffer) if len(b.present) else None))
        with phases.record(Phase.DECODE, chunks=len(pieces)):
            for group, b, decoding in started:
                if decoding is not None:
                    held.append(decoding.result())
                for i, s in zip(group, b.assemble(), strict=True):
                    stored[i] = s
    finally:  # a group's failure raises only once no decode of the block can still copy
        for _, _, decoding in started:
            if decoding is not None:
                decoding.settle()
    return make() if out is None else out, stored


_HOST_GROUP = 32 << 20  # stored bytes a group of a host-decoded block reads before its decode starts


_pinned = host_decode.pinned


def _on_host(info: ArrayInfo, pieces: Sequence[ChunkPiece], out: cp.ndarray) -> list[bool]:
    """A chain the GPU cannot decode: zarr-python on the process's pool of ``cpu-threads``, every
    chunk's part put into one pinned host block, copied into ``out`` in one copy on the task's
    stream (the block held until the task's wait: the copy is asynchronous)."""
    with phases.record(Phase.DECODE, chunks=len(pieces)):
        block, present = host_block(info, pieces, out.shape, _pinned_block)
    getattr(_held, "buffers", []).append(block)
    out.set(block, stream=cp.cuda.get_current_stream())
    return present


def _pinned_block(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return cupyx.empty_pinned(shape, dtype=dtype)


def _locate(info: ArrayInfo, pieces: Sequence[ChunkPiece]) -> list:
    """Where each piece's chunk is stored (a stat per chunk file, or the shard indexes read)."""
    with phases.record(Phase.LOCATE, chunks=len(pieces)):
        return locate(info, [p.coords for p in pieces])


def _rescue(kind: str, items: Items, bad: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The reference library's verdict on the items a device decoder refused (``bad``, as (row,
    reason)): those it decodes to their size are written to their ``dst`` on the host's copy, the
    others stay failures, as (owner, both reasons)."""
    if not bad:
        return []
    refused = items.take(np.array([j for j, _ in bad]))
    host = dict(
        host_decode.decode(
            kind, refused.src, refused.sizes, refused.dst, refused.out_sizes, cp.cuda.get_current_stream()
        ).failures()
    )
    failed = [(i, host_decode.both_reasons(why, host[i])) for i, (_, why) in enumerate(bad) if i in host]
    return refused.owned(failed)
