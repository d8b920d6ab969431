"""Batched zstd decoding by zstd block (``cuda/zstd.cu``): the frames' blocks decode at once, not one after
another in one thread block per frame as in nvCOMP, and every read and write stays inside the buffers
the frame walk checked. Chunks the kernels refuse or do not take go to ``fallback`` (libzstd on the
host)."""

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import cupy as cp
import numpy as np

from .. import kernels
from ..kernels.shared import ZSTD
from ..runtime import transfer
from . import host_decode

_RECORD = ZSTD["ZS_RECORD"]  # a zstd block's record
# bytes of a block's Huffman table and of its three FSE tables
_HUF, _FSE = 2 << ZSTD["ZS_HUF_MAX_BITS"], 3 * 2 * ZSTD["ZS_FSE_ENTRIES"]
REASONS = {  # the kernels' statuses; ZS_UNSUPPORTED, a frame they do not take, has no reason of its own
    ZSTD["ZS_TRUNC"]: "truncated zstd frame",
    ZSTD["ZS_HEADER"]: "not a zstd frame",
    ZSTD["ZS_CORRUPT"]: "corrupt zstd data",
    ZSTD["ZS_SIZE"]: "zstd frame decodes to a size other than the metadata's",
    ZSTD["ZS_OFFSET"]: "a zstd match reaches before the frame's start",
    ZSTD["ZS_DICT"]: "zstd frame needs a dictionary (none is configured)",
    ZSTD["ZS_CHECKSUM"]: "zstd content checksum does not match",
    ZSTD["ZS_TRAILING"]: "bytes after the last zstd frame that are no frame",
}
_THREADS = 128
_STEP = ZSTD["ZS_STEP"]  # the copiers' threads, one a sequence of a step
# the frame copier's step (its thread block's threads, a sequence each between barriers): zstd.cu's,
# or longer for batches of no more chunks than the device has SMs, each thread block then an SM's
# only one: there the long step copies faster, while over more chunks the short step's six thread
# blocks an SM copy faster (docs/decisions/zstd-copier.md)
FRAME_STEPS = {"short": _STEP, "long": 1024}
_XXH_THREADS, _SEQ_THREADS, _LIT_THREADS = (
    ZSTD[k] for k in ("ZS_XXH_THREADS", "ZS_SEQ_THREADS", "ZS_LIT_THREADS")
)
_WAVES_PER_LOOK = 8  # waves of the copier by waves launched between reads of the matches left
_WAVES_MAX = ZSTD["ZS_WAVES_MAX"]  # then the matches left are copied in order
_WARPS = ZSTD["ZS_WARPS"]  # the warp copier's warps a thread block
COPIERS = {"frames": ZSTD["ZS_BY_FRAME"], "waves": ZSTD["ZS_BY_WAVES"], "warps": ZSTD["ZS_BY_WARP"]}
# the waves pay only where a frame in order is the tail: chunks this large, in a batch of no more
# chunks than the GPU has SMs (a few huge chunks then copy several times faster); many small frames
# copied by waves take longer than a thread block each (docs/decisions/zstd-copier.md)
_WAVES_MIN_BYTES = 4 << 20
# a warp a frame, a sequence at a time, for frames of no more sequences than this: many small frames
# (blosc's inner streams of 32 KiB, about a thousand sequences each) copy many times faster than by a
# thread block each, but a frame of a million sequences (an 8 MiB chunk), its sequences one after
# another, copies many times slower (docs/decisions/zstd-copier.md)
_WARP_MAX_SEQUENCES = 4096
# ... and of no more bytes than this: raw and RLE blocks (incompressible or constant data) have no
# sequences, and a warp copies them 32 bytes a step where a thread block copies 256
_WARP_MAX_BYTES = 256 << 10


@dataclass(frozen=True)
class Build:
    """The kernels that decode a batch: ``zstd.cu`` with ``defines`` (names and values: its own
    bounds such as ``ZS_DEFER``, and of the constants it shares with this launcher only ``ZS_STEP``,
    the copiers' thread block, which the launches follow), each chunk copied by ``copier`` and the
    frame copier run at ``step`` (a name of ``FRAME_STEPS``) where given, else as the batch's rules
    choose. The package decodes with ``Build()``; tests reach the copiers and bounds the rules seldom
    pick."""

    defines: Mapping[str, int] = field(default_factory=dict)
    copier: str | None = None
    step: str | None = None

    def __post_init__(self) -> None:
        if self.copier is not None and self.copier not in COPIERS:
            raise ValueError(f"copier must be one of {sorted(COPIERS)}, got {self.copier!r}")
        if self.step is not None and self.step not in FRAME_STEPS:
            raise ValueError(f"step must be one of {sorted(FRAME_STEPS)}, got {self.step!r}")
        if fixed := sorted(set(self.defines) & set(ZSTD) - {"ZS_STEP"}):  # the launches are sized by them
            raise ValueError(f"{fixed} are the launcher's (kernels/shared.py): a build may not change them")

    @property
    def zs_step(self) -> int:
        """``ZS_STEP`` of this build (the copier by waves' threads): its defines', else the shared one."""
        return self.defines.get("ZS_STEP", _STEP)

    def module(self, step: int) -> cp.RawModule:
        """The kernels, compiled at their first launch, with the frame copier's thread block of
        ``step`` threads."""
        overrides = {**self.defines, "ZS_STEP": step} if step != self.zs_step else self.defines
        return kernels.module("zstd.cu", tuple(sorted(overrides.items())))


DEFAULT = Build()


def _launch(
    name: str, grid: int, *args: object, build: Build, threads: int = _THREADS, step: int = 0
) -> None:
    """Kernel ``name`` of ``build``'s module compiled at ``step`` (0: the build's ``ZS_STEP``)."""
    build.module(step or build.zs_step).get_function(name)((grid,), (threads,), args)


def _run(
    name: str, items: int, *args: object, build: Build, threads: int = _THREADS
) -> None:  # a thread an item
    _launch(name, (items + threads - 1) // threads, np.int64(items), *args, build=build, threads=threads)


class Decode:
    """One launched batch: its frames' statuses, and the device memory the kernels use, held until the
    statuses are read once the stream has run. ``reasons`` names the kernels' statuses."""

    reasons: dict[int, str] = REASONS

    def __init__(
        self,
        status: cp.ndarray,
        fallback: Callable[[np.ndarray], list[tuple[int, str]]],
        held: tuple,
        stream: cp.cuda.Stream,
    ) -> None:
        self.status, self.fallback, self.held, self.stream = status, fallback, held, stream

    def failures(self) -> list[tuple[int, str]]:
        """The chunks not decoded, as (index, reason), once the stream has passed the decode. The
        kernels take only well-formed frames; the chunks they refuse or do not take are decoded by
        ``fallback`` (libzstd on the host), whose verdict is final: those it decodes are no failures,
        the others carry both reasons."""
        status = transfer.read(self.status, self.stream)
        self.held = ()
        refused = np.flatnonzero(status)
        if not len(refused):
            return []
        host = dict(self.fallback(refused))
        kernels = {int(i): self.reasons.get(int(status[i])) for i in refused}  # zstd: none for 5
        return [(i, host_decode.both_reasons(why, host[i])) for i, why in kernels.items() if i in host]


def launch(
    src: np.ndarray,
    src_sizes: np.ndarray,
    dst: np.ndarray,
    dst_sizes: np.ndarray,
    stream: cp.cuda.Stream,
    fallback: Callable[[np.ndarray], list[tuple[int, str]]],
    verify: bool,
    build: Build = DEFAULT,
) -> Decode:
    """Decode zstd chunk ``i`` (``src_sizes[i]`` bytes at device address ``src[i]``: frames and skippable
    frames) into ``dst_sizes[i]`` bytes at device address ``dst[i]`` on ``stream`` (the current stream);
    with ``verify``, the frames' content checksums are checked; ``build`` says which kernels.

    The frames' block headers are walked first and their counts read back (the stream is waited for,
    as nvCOMP's scratch query does), so that the scratch is sized from headers checked against the
    metadata: per block 7.2 KiB of tables, 8 bytes a sequence (every match is 3 bytes or more), the
    literals (docs/design.md compares it with nvCOMP's query). Each chunk's copier is ``_copiers``':
    by waves (``_copy_by_waves``: a bit a decoded byte more), a warp a frame, or a thread block a
    frame.
    """
    n = len(src)
    cols, pinned = transfer.upload([src, src_sizes, dst, dst_sizes], np.uint64)
    src_d, dst_d = cols[:n], cols[2 * n : 3 * n]
    sizes_d, expected_d = cols[n : 2 * n].view(np.int64), cols[3 * n :].view(np.int64)
    status = cp.zeros(n, dtype=np.int32)
    counts = cp.zeros(3 * n, dtype=np.int64)
    _run("zs_count", n, src_d, sizes_d, expected_d, counts, status, build=build)
    per_frame = transfer.read(counts, stream).reshape(n, 3)
    del pinned  # the stream has passed the upload
    base = np.zeros((n, 3), dtype=np.int64)
    base[1:] = np.cumsum(per_frame, axis=0)[:-1]
    blocks, lits, seqs = (int(v) for v in per_frame.sum(axis=0))
    held: tuple = (cols, counts)
    if blocks:
        at = np.cumsum([0, blocks * _RECORD, blocks * _HUF, blocks * _FSE, seqs * 8, lits])
        scratch = cp.empty(int(at[-1]), dtype=np.uint8)
        rec, huf, fse, seq, lit = (scratch[at[k] : at[k + 1]] for k in range(5))
        base_d, base_h = transfer.upload([base.ravel()], np.int64)
        _run("zs_fill", n, src_d, sizes_d, expected_d, counts, base_d, rec, status, build=build)
        _run("zs_tables", blocks, src_d, rec, huf, fse, status, build=build)
        _run("zs_literals", 4 * blocks, src_d, rec, huf, lit, status, threads=_LIT_THREADS, build=build)
        _run("zs_sequences", blocks, src_d, rec, fse, seq, status, threads=_SEQ_THREADS, build=build)
        _run("zs_place", n, base_d, counts, rec, expected_d, status, build=build)
        which = _copiers(per_frame, np.asarray(dst_sizes, dtype=np.int64), build.copier)
        which_d, which_h = transfer.upload([which], np.uint8)
        copy = (np.int64(n), base_d, counts, src_d, rec, lit, seq, dst_d, which_d, status)
        if (which == COPIERS["frames"]).any():
            step = _frame_step(n, build)
            _launch(
                "zs_copy", n, *copy, build=build, threads=step, step=step
            )  # a thread block a chunk it copies
        if (which == COPIERS["warps"]).any():
            _launch("zs_copy_warps", (n + _WARPS - 1) // _WARPS, *copy, build=build, threads=32 * _WARPS)
        held += (which_d, base_h, which_h)
        if (which == COPIERS["waves"]).any():
            held += _copy_by_waves(
                n,
                blocks,
                base_d,
                counts,
                src_d,
                rec,
                lit,
                seq,
                dst_d,
                dst_sizes,
                which_d,
                status,
                stream,
                build,
            )
        if verify:
            grid = (4 * blocks + _XXH_THREADS - 1) // _XXH_THREADS
            _launch(
                "zs_checksum", grid, np.int64(blocks), rec, dst_d, status, build=build, threads=_XXH_THREADS
            )
        held += (scratch, base_d)
    return Decode(status, fallback, held, stream)


def _copiers(per_frame: np.ndarray, decoded: np.ndarray, copier: str | None = None) -> np.ndarray:
    """Each chunk's copier (``COPIERS``, as uint8) from its counts of blocks, literal bytes and
    sequences: ``copier``'s choice, else by waves where its literals are half its decoded bytes or
    more, ``_WAVES_MIN_BYTES`` or more, in a batch of at most as many chunks as the device has SMs; a
    warp a frame where it has ``_WARP_MAX_SEQUENCES`` sequences or fewer and ``_WARP_MAX_BYTES`` or
    fewer; else a thread block a frame."""
    if copier is not None:
        return np.full(len(decoded), COPIERS[copier], dtype=np.uint8)
    lits, seqs = per_frame[:, 1], per_frame[:, 2]
    few = len(decoded) <= _sms(cp.cuda.Device().id)
    waves = (2 * lits >= decoded) & (decoded >= _WAVES_MIN_BYTES) & few
    small = (seqs <= _WARP_MAX_SEQUENCES) & (decoded <= _WARP_MAX_BYTES)
    by_warp = np.where(small, COPIERS["warps"], COPIERS["frames"])
    return np.where(waves, COPIERS["waves"], by_warp).astype(np.uint8)


def _frame_step(n: int, build: Build = DEFAULT) -> int:
    """The frame copier's step for a batch of ``n`` chunks (its grid: a thread block each, those of
    other copiers leaving at once): a build with defines of its own keeps its ``ZS_STEP``; else the
    build's ``step``, else the long step for no more chunks than SMs where its kernel launches that
    many threads."""
    if build.defines:  # a build of its own: its copiers' thread blocks are its ZS_STEP
        return build.zs_step
    if build.step is not None:
        return FRAME_STEPS[build.step]
    device = cp.cuda.Device().id
    return FRAME_STEPS["long" if n <= _sms(device) and _long_step_launches(device) else "short"]


@functools.cache
def _long_step_launches(device: int) -> bool:
    """Whether the long step's copier takes thread blocks of its size on ``device``: its registers a
    thread decide it (no launch bound is set, so that the short step's code stays as compiled)."""
    with cp.cuda.Device(device):
        copy = DEFAULT.module(FRAME_STEPS["long"]).get_function("zs_copy")
        return int(copy.max_threads_per_block) >= FRAME_STEPS["long"]


@functools.cache
def _sms(device: int) -> int:
    """Device ``device``'s SMs, asked once (``Device.attributes`` asks the driver for every attribute)."""
    return int(cp.cuda.Device(device).attributes["MultiProcessorCount"])


def _copy_by_waves(
    n: int,
    blocks: int,
    base_d: cp.ndarray,
    counts: cp.ndarray,
    src_d: cp.ndarray,
    rec: cp.ndarray,
    lit: cp.ndarray,
    seq: cp.ndarray,
    dst_d: cp.ndarray,
    dst_sizes: np.ndarray,
    which_d: cp.ndarray,
    status: cp.ndarray,
    stream: cp.cuda.Stream,
    build: Build,
) -> tuple:
    """The copier by waves (``cuda/zstd.cu``) for the chunks ``which_d`` gives it: their blocks' literals
    placed, then waves of the matches whose sources are ready, ``_WAVES_PER_LOOK`` between reads of the
    count left, until none is left, a look finds no progress (only failed chunks keep theirs: every
    wave completes a match of each sound frame with one left) or ``_WAVES_MAX`` waves have run; then
    a thread a chunk finishes the matches left in order. Returns what the stream still uses."""
    words = np.asarray(dst_sizes, dtype=np.int64) // 32 + 2  # a bit a decoded byte
    starts = np.cumsum([0, *words])
    bits = cp.zeros(int(starts[-1]), dtype=np.uint32)
    bits_d = cp.asarray(np.uint64(bits.data.ptr) + 4 * starts[:-1].astype(np.uint64))
    remaining = cp.empty(blocks, dtype=np.int32)
    left = cp.zeros(1, dtype=np.uint64)
    grid = np.int64(blocks)
    resolve = (grid, src_d, rec, lit, seq, dst_d, bits_d, remaining, left, which_d, status)
    _launch("zs_resolve_blocks", blocks, *resolve, build=build, threads=build.zs_step)
    before = None
    for _ in range(_WAVES_MAX // _WAVES_PER_LOOK):
        for _ in range(_WAVES_PER_LOOK):
            _launch(
                "zs_wave",
                blocks,
                grid,
                rec,
                seq,
                dst_d,
                bits_d,
                remaining,
                left,
                status,
                build=build,
                threads=build.zs_step,
            )
        now = int(transfer.read(left, stream)[0])
        if now == 0 or now == before:
            break
        before = now
    else:  # the waves' bound: the rest in order
        _run("zs_finish", n, base_d, counts, rec, seq, remaining, dst_d, bits_d, which_d, status, build=build)
    return (bits, bits_d, remaining, left)
