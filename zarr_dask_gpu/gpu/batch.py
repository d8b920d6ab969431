"""A block's chunks as the GPU backend decodes them: read, checked, and given a place to decode to."""

from collections.abc import Sequence
from dataclasses import dataclass

import cupy as cp
import numpy as np

from .. import config
from ..codecs.chain import GpuChain
from ..codecs.logical import logical_chunk
from ..codecs.stored import crc32c_matches
from ..errors import ChunkDecodeError
from ..metadata import ArrayInfo
from ..plan import ChunkPiece, direct_offsets
from ..storage.readers import Staged
from .decoders import validate
from .runtime.gather import aligned

ALIGN = 16  # nvCOMP wants aligned inputs (Gzip/Deflate: 4 bytes); 16 covers every algorithm
_OUT_ALIGN = 256


@dataclass(frozen=True)
class Batch:
    """One block of ``decode_many`` once its chunks are read: the present chunks, their payloads in
    the staging buffer, and where they decode to.

    Attributes
    ----------
    info, pieces, out, chain
        The array, the block's chunk pieces, the block and the array's GPU chain.
    buffer
        The staging buffer the chunks were read into.
    present
        Indices of the pieces whose chunk is stored.
    offsets, sizes
        Each present chunk's payload in ``buffer`` (a trailing crc32c, verified, left out).
    decoded, starts
        Where each present chunk's decoded bytes go: ``decoded[starts[j]:]``; for raw chunks the
        payloads themselves, aligned.
    placed
        ``decoded`` is the block itself: every chunk lies whole, contiguous and aligned in it, so
        it decodes straight there and no scratch of its size is needed.
    """

    info: ArrayInfo
    pieces: Sequence[ChunkPiece]
    out: cp.ndarray
    chain: GpuChain
    buffer: cp.ndarray
    present: np.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    decoded: cp.ndarray | None
    starts: np.ndarray
    placed: bool

    @classmethod
    def of(cls, info: ArrayInfo, pieces: Sequence[ChunkPiece], out: cp.ndarray, staged: Staged) -> "Batch":
        """The batch of a block whose chunks ``staged`` holds (on the device, or on the host for the
        compressions the host decodes), its raw chunks' sizes and crc32c checksums checked.

        Raises
        ------
        ChunkDecodeError
            A chunk's checksum or raw size is wrong; the message names the first such chunk's key.
        """
        chain = info.chain.gpu
        assert chain is not None, "a chain the GPU decodes"
        present = np.flatnonzero(staged.present)
        offsets, sizes = staged.offsets[present], staged.sizes[present]
        none = np.zeros(0, dtype=np.int64)
        if not len(present):
            return cls(info, pieces, out, chain, staged.buffer, present, none, none, None, none, False)
        expected = expected_bytes(info, chain)
        if chain.crc32c:  # the last 4 bytes are a crc32c of the rest: verify, then leave them out
            _raise_first(
                info, pieces, present, [(j, "shorter than its crc32c") for j in np.flatnonzero(sizes < 4)]
            )
            if config.flag("verify-checksums"):
                on_device = isinstance(staged.buffer, cp.ndarray)
                mismatches = validate.crc32c_mismatches if on_device else _crc32c_mismatches
                bad_crc = mismatches(staged.buffer, offsets, sizes)
                _raise_first(
                    info, pieces, present, [(int(j), "crc32c checksum does not match") for j in bad_crc]
                )
            sizes = sizes - 4
        if chain.compression == "none":
            wrong = np.flatnonzero(sizes != expected)
            why = [(j, f"raw chunk has {sizes[j]} bytes, metadata says {expected}") for j in wrong]
            _raise_first(info, pieces, present, why)
            decoded, starts = aligned(staged.buffer, offsets, sizes, ALIGN)
            return cls(
                info, pieces, out, chain, staged.buffer, present, offsets, sizes, decoded, starts, False
            )
        into = (  # where each present chunk lies whole in the block, if the chain allows it
            direct_offsets([pieces[int(i)] for i in present], out.shape, info.chunks, info.dtype.itemsize)
            if chain.decodes_in_place(info.dtype)
            else None
        )
        placed = into is not None and bool((into >= 0).all()) and not (into % _OUT_ALIGN).any()
        if into is not None and placed:
            decoded, starts = out.reshape(-1).view(np.uint8), into
        else:
            step = -(-expected // _OUT_ALIGN) * _OUT_ALIGN
            starts = np.arange(len(present)) * step
            decoded = cp.empty(max(len(present) * step, 1), dtype=np.uint8)
        return cls(info, pieces, out, chain, staged.buffer, present, offsets, sizes, decoded, starts, placed)

    @property
    def expected(self) -> int:
        """A chunk's decoded bytes, out of the decompressor."""
        return expected_bytes(self.info, self.chain)

    @property
    def out_addresses(self) -> np.ndarray:
        """Each present chunk's device address to decode to."""
        assert self.decoded is not None
        return np.uint64(self.decoded.data.ptr) + self.starts.astype(np.uint64)

    def raise_first(self, bad: list[tuple[int, str]]) -> None:
        """``ChunkDecodeError`` for the first of ``bad`` (indices into the present chunks, with
        reasons), naming its key; nothing when ``bad`` is empty."""
        _raise_first(self.info, self.pieces, self.present, bad)

    def assemble(self) -> list[bool]:
        """Each present chunk's part put into the block (unless it was decoded there); per piece,
        whether its chunk is stored."""
        if self.decoded is not None and not self.placed:
            n = self.expected
            for j, i in enumerate(self.present):
                lo, piece = int(self.starts[j]), self.pieces[int(i)]
                chunk = logical_chunk(
                    cp, self.decoded[lo : lo + n], self.info.chunks, self.info.dtype, self.chain
                )
                self.out[piece.block_sel] = chunk[piece.chunk_sel]
        stored = [False] * len(self.pieces)
        for i in self.present:
            stored[int(i)] = True
        return stored


def expected_bytes(info: ArrayInfo, chain: GpuChain) -> int:
    """A chunk's decoded bytes, out of the decompressor (before the filters are undone)."""
    return int(np.prod(info.chunks)) * chain.stored_itemsize(info.dtype)


def _crc32c_mismatches(buffer: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices of the chunks in host ``buffer`` whose last 4 bytes are not the crc32c of the rest."""
    view = memoryview(buffer)
    spans = zip(offsets.tolist(), sizes.tolist(), strict=True)
    return np.array([j for j, (at, n) in enumerate(spans) if not crc32c_matches(view[at : at + n])], np.int64)


def _raise_first(info: ArrayInfo, pieces: Sequence[ChunkPiece], present: np.ndarray, bad: list) -> None:
    if bad:
        j, reason = bad[0]
        c = pieces[present[j]].coords
        more = f" (and {len(bad) - 1} more damaged chunks in this block)" if len(bad) > 1 else ""
        raise ChunkDecodeError(info.location, info.chunk_key(c), info.chunk_label(c) + reason + more)
