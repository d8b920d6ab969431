"""A fuzz corpus of stored zarr chunks, sound and damaged, with each one's verdict from the reference
libraries (numcodecs: libzstd, c-blosc, liblz4, zlib), never written down by hand.

``corpus(seed, scale)`` builds the cases; ``reference(case)`` says what numcodecs makes of one, as
zarr-python calls it (``codec.decode(chunk)``, no output buffer). zstd damage knows the frame's
sections (``zstd_sections``, a small bounded parser of RFC 8878 frames): bit flips in each of them,
truncations at and inside each, edits of block, window, content-size, dictionary-id and
sequence-count fields, and frames whose header and metadata agree on a size the data overruns.
Valid but unusual chunks (several frames, skippable frames, no content size, checksums, windows,
trailing bytes after a blosc payload, one-element and constant chunks) sit beside them.
"""

import collections
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numcodecs
import numpy as np
import zstandard
from numcodecs.compat import ensure_contiguous_ndarray

# blosc's blosclz has no GPU decoder: its chunks exercise the host's guard of chains zarr-python decodes
CODECS = (
    "zstd",
    "lz4",
    "gzip",
    "zlib",
    "blosc-lz4",
    "blosc-lz4hc",
    "blosc-zstd",
    "blosc-zlib",
    "blosc-blosclz",
)
ZSTD_MAGIC = 0xFD2FB528
KIB, MIB = 1 << 10, 1 << 20

# every section zstd_sections names in a zstd frame (skippable frames apart)
ZSTD_SECTIONS = (
    "magic",
    "frame-descriptor",
    "window-descriptor",
    "dictionary-id",
    "content-size",
    "block-header",
    "raw-block",
    "rle-block",
    "literals-header",
    "literals-raw",
    "literals-rle",
    "huffman-tree",
    "jump-table",
    "literal-streams",
    "sequences-header",
    "fse-tables",
    "sequence-bitstream",
    "content-checksum",
)
# the fields of a blosc1 header, as (name, offset, length)
BLOSC_FIELDS = (
    ("version", 0, 1),
    ("versionlz", 1, 1),
    ("flags", 2, 1),
    ("typesize", 3, 1),
    ("nbytes", 4, 4),
    ("blocksize", 8, 4),
    ("cbytes", 12, 4),
)


@dataclass(frozen=True)
class Case:
    """One stored chunk and what the array's metadata says of it.

    Attributes
    ----------
    codec
        One of ``CODECS``.
    label
        What was done to the written chunk: ``"sound"`` (as written; ``"sound:<how>"`` for unusual
        writers), or a damage such as ``"flip:literal-streams"``, ``"truncate:block-header"``.
    data
        The stored chunk bytes.
    size
        The chunk's decoded size in bytes, as the metadata says.
    itemsize
        Element size of the array it belongs to (1, 2, 4 or 8); ``size % itemsize == 0``.
    config
        The numcodecs codec config that writes this codec.
    """

    codec: str
    label: str
    data: bytes
    size: int
    itemsize: int
    config: dict


# ---------------------------------------------------------------------------------------------
# the reference


def reference(case: Case) -> bytes | None:
    """The decoded bytes where numcodecs (libzstd, c-blosc, liblz4, zlib, as zarr-python calls them)
    decodes the chunk to exactly case.size bytes; None where it raises or decodes to another size.

    Two short cuts never change a verdict: numcodecs' lz4 and blosc allocate their output from the
    chunk's own header, so a header size other than ``case.size`` is None without decoding. One rule
    stands in for undefined behaviour: c-blosc reads as many bytes as the blosc header's ``cbytes``
    says (numcodecs passes it no length), so a chunk shorter than 16 bytes or than its ``cbytes`` (or
    whose ``cbytes`` is under 16) is None (what it would decode lies outside the chunk). And where
    numcodecs' Zstd would never return (``numcodecs_hangs``), the verdict is None without calling it.
    """
    data = case.data
    if case.codec == "zstd" and numcodecs_hangs(data):
        return None
    if case.codec.startswith("blosc"):
        if len(data) < 16:
            return None
        nbytes, _, cbytes = struct.unpack_from("<iii", data, 4)
        if nbytes != case.size or cbytes > len(data) or cbytes < 16:
            return None
    elif case.codec == "lz4" and len(data) >= 4 and struct.unpack_from("<i", data)[0] != case.size:
        return None
    codec = numcodecs.get_codec(case.config)
    try:
        out = codec.decode(data)
        got = ensure_contiguous_ndarray(out).view(np.uint8).tobytes()
    except Exception:  # numcodecs raises RuntimeError, ValueError, zlib.error, BadGzipFile, ...
        return None
    return got if len(got) == case.size else None


def _strict_header_prefix(tail: bytes) -> bool:
    """``tail`` is the start of a zstd or skippable frame header, cut before the header ends."""
    k = len(tail)
    zm = struct.pack("<I", ZSTD_MAGIC)
    if k and tail[:4] == zm[: min(k, 4)]:
        if k < 5:
            return True
        fhd = tail[4]
        single = (fhd >> 5) & 1
        hlen = 5 + (1 - single) + (0, 1, 2, 4)[fhd & 3] + ((single, 2, 4, 8)[fhd >> 6])
        return k < hlen
    return 0 < k < 8 and tail[0] & 0xF0 == 0x50 and tail[1:4] == b"\x2a\x4d\x18"[: k - 1]


def numcodecs_hangs(data: bytes) -> bool:
    """numcodecs' ``Zstd.decode`` (0.17.1, libzstd 1.5.6) never returns on ``data``.

    It takes its streaming path when a frame has no content size, and loops while its input is not
    all consumed or libzstd asks for more: after whole frames, 1 to 17 bytes that begin another
    frame's header (its magic number, or a skippable frame's) are buffered, libzstd asks for the rest
    of the header, no input is left, and the loop spins for ever (its "no forward progress" error
    only counts calls inside a frame). Seen with a frame without content size followed by 1-6 bytes
    of another frame, 1-5 of a frame without content size, or 1-7 of a skippable frame.
    """
    for k in range(1, min(18, len(data))):
        if _strict_header_prefix(data[-k:]) and _streams_whole(data[:-k]):
            return True
    return False


def _streams_whole(data: bytes) -> bool:
    """``data`` is whole frames, one without a content size (numcodecs then decodes by streaming),
    and numcodecs decodes them."""
    try:
        frames, _ = parse_zstd(data)
    except ParseError:
        return False
    if all(f.fcs(data) is not None for f in frames if f.blocks):
        return False
    if numcodecs_hangs(data):
        return False
    try:
        numcodecs.Zstd().decode(data)
    except Exception:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# zstd frames, section by section (RFC 8878)


@dataclass(frozen=True)
class Section:
    """Bytes ``[start, end)`` of a chunk, named as in ``ZSTD_SECTIONS`` (or ``skippable-frame``)."""

    name: str
    start: int
    end: int
    frame: int = 0
    block: int = -1


@dataclass(frozen=True)
class ZstdBlock:
    header: int  # offset of the 3-byte block header
    last: bool
    type: int  # 0 raw, 1 RLE, 2 compressed
    size: int  # Block_Size (the regenerated size for RLE blocks)
    literals: tuple[int, int, int, int] | None = (
        None  # compressed: (header offset, length, type, size format)
    )
    sequences: tuple[int, int, int] | None = None  # compressed: (header offset, count bytes, count)


@dataclass(frozen=True)
class ZstdFrame:
    start: int
    end: int
    header_end: int
    single_segment: bool
    checksum: bool
    window: int | None  # offset of the window descriptor
    dict_id: tuple[int, int]  # (offset, length)
    content_size: tuple[int, int]  # (offset, length)
    blocks: tuple[ZstdBlock, ...]

    def fcs(self, data: bytes) -> int | None:
        at, n = self.content_size
        if not n:
            return None
        return int.from_bytes(data[at : at + n], "little") + (256 if n == 2 else 0)


class ParseError(ValueError):
    pass


class _Bits:
    """A forward little-endian bit reader over ``data[start:end]`` (FSE table descriptions)."""

    def __init__(self, data: bytes, start: int, end: int) -> None:
        self.data, self.start, self.end, self.pos = data, start, end, 0

    def read(self, n: int) -> int:
        v = 0
        for i in range(n):
            byte = self.start + ((self.pos + i) >> 3)
            if byte >= self.end:
                raise ParseError("FSE table description runs past its block")
            v |= ((self.data[byte] >> ((self.pos + i) & 7)) & 1) << i
        self.pos += n
        return v


def _fse_table_length(data: bytes, start: int, end: int, max_log: int) -> int:
    """Bytes of the FSE table description at ``start`` (RFC 8878 4.1.1; the educational decoder)."""
    bits = _Bits(data, start, end)
    log = bits.read(4) + 5
    if log > max_log:
        raise ParseError("FSE accuracy log too large")
    remaining, symbols = 1 << log, 0
    while remaining > 0 and symbols < 256:
        n = (remaining + 1).bit_length()  # highest_set_bit(remaining + 1) + 1
        val = bits.read(n)
        lower = (1 << (n - 1)) - 1
        threshold = (1 << n) - 1 - (remaining + 1)
        if (val & lower) < threshold:
            bits.pos -= 1
            val &= lower
        elif val > lower:
            val -= threshold
        proba = val - 1
        remaining -= -proba if proba < 0 else proba
        symbols += 1
        if proba == 0:
            while True:
                repeat = bits.read(2)
                symbols += repeat
                if repeat != 3:
                    break
    if remaining != 0:
        raise ParseError("FSE table description does not sum to its accuracy")
    return (bits.pos + 7) >> 3


def _compressed_block(data, q, end, frame, block, out) -> tuple[tuple, tuple]:
    """Sections of the compressed block ``data[q:end]`` appended to ``out``."""

    def add(name, a, b):
        if not q <= a <= b <= end:
            raise ParseError(f"{name} runs past its block")
        out.append(Section(name, a, b, frame, block))

    b0 = data[q]
    ltype, sf = b0 & 3, (b0 >> 2) & 3
    if ltype in (0, 1):  # raw or RLE literals
        hl = {0: 1, 2: 1, 1: 2, 3: 3}[sf]
        h = int.from_bytes(data[q : q + hl], "little")
        regen = h >> 3 if hl == 1 else h >> 4
        add("literals-header", q, q + hl)
        n = regen if ltype == 0 else 1
        if n:
            add("literals-raw" if ltype == 0 else "literals-rle", q + hl, q + hl + n)
        r = q + hl + n
    else:  # compressed or treeless literals
        hl = {0: 3, 1: 3, 2: 4, 3: 5}[sf]
        width = {3: 10, 4: 14, 5: 18}[hl]
        h = int.from_bytes(data[q : q + hl], "little")
        csize = (h >> (4 + width)) & ((1 << width) - 1)
        add("literals-header", q, q + hl)
        r, stop = q + hl, q + hl + csize
        if ltype == 2:
            hb = data[r]
            tree = 1 + hb if hb < 128 else 1 + (hb - 127 + 1) // 2
            add("huffman-tree", r, r + tree)
            r += tree
        if sf != 0:
            add("jump-table", r, r + 6)
            r += 6
        add("literal-streams", r, stop)
        r = stop
    literals = (q, hl, ltype, sf)
    if r >= end:
        raise ParseError("block ends before its sequences section")
    s = r
    c0 = data[s]
    if c0 == 0:
        count, nb = 0, 1
    elif c0 < 128:
        count, nb = c0, 1
    elif c0 < 255:
        count, nb = ((c0 - 128) << 8) + data[s + 1], 2
    else:
        count, nb = data[s + 1] + (data[s + 2] << 8) + 0x7F00, 3
    if count == 0:
        add("sequences-header", s, s + nb)
        if s + nb != end:
            raise ParseError("bytes after an empty sequences section")
        return literals, (s, nb, 0)
    add("sequences-header", s, s + nb + 1)
    modes = data[s + nb]
    if modes & 3:
        raise ParseError("reserved bits of the compression modes set")
    t = s + nb + 1
    for shift, max_log in ((6, 9), (4, 8), (2, 9)):  # literal lengths, offsets, match lengths
        mode = (modes >> shift) & 3
        if mode == 1:
            add("fse-tables", t, t + 1)
            t += 1
        elif mode == 2:
            n = _fse_table_length(data, t, end, max_log)
            add("fse-tables", t, t + n)
            t += n
    add("sequence-bitstream", t, end)
    return literals, (s, nb, count)


def parse_zstd(
    data: bytes, max_frames: int = 16, max_blocks: int = 4096
) -> tuple[list[ZstdFrame], list[Section]]:
    """The frames of a zstd chunk and the byte ranges of their sections, in order and tiling the
    chunk; skippable frames are one ``skippable-frame`` section each.

    Raises
    ------
    ParseError
        The bytes are not whole, well-formed frames (the parser is for sound chunks).
    """
    frames: list[ZstdFrame] = []
    out: list[Section] = []
    pos, n = 0, len(data)

    def need(a, b):
        if b > n:
            raise ParseError(f"truncated at {a}")

    while pos < n:
        if len(frames) >= max_frames:
            raise ParseError("too many frames")
        need(pos, pos + 4)
        magic = struct.unpack_from("<I", data, pos)[0]
        fi = len(frames)
        if 0x184D2A50 <= magic <= 0x184D2A5F:
            need(pos, pos + 8)
            end = pos + 8 + struct.unpack_from("<I", data, pos + 4)[0]
            need(pos, end)
            out.append(Section("skippable-frame", pos, end, fi))
            frames.append(ZstdFrame(pos, end, end, False, False, None, (0, 0), (0, 0), ()))
            pos = end
            continue
        if magic != ZSTD_MAGIC:
            raise ParseError(f"bad magic at {pos}")
        need(pos, pos + 5)
        out.append(Section("magic", pos, pos + 4, fi))
        fhd = data[pos + 4]
        if fhd & 0x08:
            raise ParseError("reserved bit set")
        out.append(Section("frame-descriptor", pos + 4, pos + 5, fi))
        single, checksum = bool(fhd & 0x20), bool(fhd & 0x04)
        p = pos + 5
        window = None
        if not single:
            need(p, p + 1)
            out.append(Section("window-descriptor", p, p + 1, fi))
            window, p = p, p + 1
        did = (0, 1, 2, 4)[fhd & 3]
        need(p, p + did)
        if did:
            out.append(Section("dictionary-id", p, p + did, fi))
        dict_id, p = (p, did), p + did
        fcs = ((1 if single else 0), 2, 4, 8)[fhd >> 6]
        need(p, p + fcs)
        if fcs:
            out.append(Section("content-size", p, p + fcs, fi))
        content_size, p = (p, fcs), p + fcs
        header_end = p
        blocks = []
        while True:
            if len(blocks) >= max_blocks:
                raise ParseError("too many blocks")
            need(p, p + 3)
            bh = int.from_bytes(data[p : p + 3], "little")
            last, btype, bsize = bool(bh & 1), (bh >> 1) & 3, bh >> 3
            bi = len(blocks)
            out.append(Section("block-header", p, p + 3, fi, bi))
            q = p + 3
            lit = seq = None
            if btype == 0:
                need(q, q + bsize)
                if bsize:
                    out.append(Section("raw-block", q, q + bsize, fi, bi))
                p = q + bsize
            elif btype == 1:
                need(q, q + 1)
                out.append(Section("rle-block", q, q + 1, fi, bi))
                p = q + 1
            elif btype == 2:
                need(q, q + bsize)
                if bsize < 2:
                    raise ParseError("compressed block too short")
                lit, seq = _compressed_block(data, q, q + bsize, fi, bi, out)
                p = q + bsize
            else:
                raise ParseError("reserved block type")
            blocks.append(ZstdBlock(q - 3, last, btype, bsize, lit, seq))
            if last:
                break
        if checksum:
            need(p, p + 4)
            out.append(Section("content-checksum", p, p + 4, fi))
            p += 4
        frames.append(
            ZstdFrame(pos, p, header_end, single, checksum, window, dict_id, content_size, tuple(blocks))
        )
        pos = p
    return frames, out


def zstd_sections(data: bytes) -> list[Section]:
    """The byte ranges of a zstd chunk's sections (see ``parse_zstd``)."""
    return parse_zstd(data)[1]


def zstd_header(
    *,
    single: bool,
    fcs: int | None,
    fcs_bytes: int | None = None,
    window: int | None = None,
    dict_id: int = 0,
    dict_bytes: int = 0,
    checksum: bool = False,
) -> bytes:
    """A zstd frame header. ``fcs_bytes`` defaults to the smallest width that holds ``fcs``;
    ``window`` is the descriptor byte (required when not ``single``)."""
    if fcs is None:
        width = 0
    elif fcs_bytes is not None:
        width = fcs_bytes
    elif single and fcs < 256:
        width = 1
    else:
        width = 2 if 256 <= fcs < 65536 + 256 else 4 if fcs < 1 << 32 else 8
    if single and width == 0:
        raise ValueError("a single-segment frame has a content size")
    flag = {0: 0, 1: 0, 2: 1, 4: 2, 8: 3}[width]
    fhd = flag << 6 | int(single) << 5 | int(checksum) << 2 | {0: 0, 1: 1, 2: 2, 4: 3}[dict_bytes]
    out = struct.pack("<IB", ZSTD_MAGIC, fhd)
    if not single:
        out += bytes([window])
    out += dict_id.to_bytes(dict_bytes, "little")
    if width:
        out += ((fcs - 256) if width == 2 else fcs).to_bytes(width, "little")
    return out


def window_byte(log: int, mantissa: int = 0) -> int:
    """The window descriptor of a window of ``2**log * (1 + mantissa / 8)`` bytes (``log`` 10-41)."""
    return (log - 10) << 3 | mantissa


def window_for(size: int) -> int:
    """The smallest plain window descriptor whose window holds ``size`` bytes."""
    return window_byte(max(10, (max(size, 1) - 1).bit_length()))


# ---------------------------------------------------------------------------------------------
# data


_WORDS = tuple(
    [
        "zarr",
        "chunk",
        "array",
        "shard",
        "codec",
        "blosc",
        "frame",
        "block",
        "window",
        "literal",
        "match",
        "offset",
        "sequence",
        "stream",
        "header",
        "table",
        "checksum",
        "metadata",
        "dask",
        "cupy",
        "device",
        "kernel",
        "decode",
        "encode",
        "store",
        "key",
        "index",
        "the",
        "a",
        "of",
        "and",
        "to",
        "in",
        "is",
        "it",
        "that",
        "for",
        "on",
        "with",
        "as",
        "by",
    ]
)


def make_data(kind: str, size: int, rng: np.random.Generator) -> bytes:
    """``size`` bytes of one kind: smooth, random, zeros, constant, text or runs."""
    if kind == "smooth":  # a sine plus noise rounded to 0.1, float32: many matches
        n = -(-size // 4)
        t = np.arange(n, dtype=np.float64)
        x = np.sin(t / 200.0) * 50 + rng.normal(0, 0.3, n)
        return np.round(x, 1).astype("<f4").tobytes()[:size]
    if kind == "random":
        return rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    if kind == "zeros":
        return bytes(size)
    if kind == "constant":
        return bytes([int(rng.integers(1, 256))]) * size
    if kind == "text":
        words = rng.choice(_WORDS, size // 3 + 8)
        return (" ".join(words).encode() * 2)[:size]
    if kind == "runs":
        lengths = rng.geometric(1 / 40, size // 8 + 8)
        values = rng.integers(0, 256, len(lengths), dtype=np.uint8)
        return np.repeat(values, lengths).tobytes()[:size].ljust(size, b"\x07")
    raise ValueError(kind)


KINDS = ("smooth", "random", "zeros", "constant", "text", "runs")


def _itemsize_for(kind: str, size: int, rng: np.random.Generator) -> int:
    if kind == "smooth" and size % 4 == 0:
        return 4
    options = [s for s in (1, 2, 4, 8) if size % s == 0]
    return int(rng.choice(options))


# ---------------------------------------------------------------------------------------------
# byte edits


def flip(data: bytes, pos: int, bit: int) -> bytes:
    b = bytearray(data)
    b[pos] ^= 1 << bit
    return bytes(b)


def put(data: bytes, pos: int, value: bytes) -> bytes:
    return data[:pos] + value + data[pos + len(value) :]


def _flip_in(rng: np.random.Generator, data: bytes, start: int, end: int) -> bytes:
    pos = int(rng.integers(start, end))
    return flip(data, pos, int(rng.integers(0, 8)))


def _inside(rng: np.random.Generator, start: int, end: int) -> int | None:
    """A cut strictly inside ``[start, end)``, or None when the range has fewer than 2 bytes."""
    return int(rng.integers(start + 1, end)) if end - start >= 2 else None


# ---------------------------------------------------------------------------------------------
# zstd


def _zstd_config(level: int = 3, checksum: bool = False) -> dict:
    return numcodecs.Zstd(level=level, checksum=checksum).get_config()


def _zstd_base_cases(rng: np.random.Generator, scale: str) -> list[tuple[Case, bytes]]:
    """Sound zstd chunks (with the bytes they decode to), of many writers and settings."""
    out: list[tuple[Case, bytes]] = []
    sizes = [KIB, 3 * KIB, 16 * KIB, 64 * KIB, 200 * KIB, MIB]
    if scale == "full":
        sizes += [2 * KIB, 40 * KIB, 300 * KIB, 2 * MIB, 4 * MIB]

    def add(label, data, raw, itemsize, config):
        out.append((Case("zstd", label, data, len(raw), itemsize, config), raw))

    k = 0
    for size in sizes:
        for kind in KINDS:
            if size >= MIB and kind not in ("smooth", "random", "text"):
                continue
            raw = make_data(kind, size, rng)
            it = _itemsize_for(kind, size, rng)
            level = (1, 3, 9, 19)[k % 4] if size <= 64 * KIB else (1, 3)[k % 2]
            checksum = k % 5 == 4
            config = _zstd_config(level, checksum)
            add(
                "sound" if not checksum else "sound:checksum",
                numcodecs.get_codec(config).encode(raw),
                raw,
                it,
                config,
            )
            k += 1
    # zstandard, as tensorstore and others write: no content size, checksums, small windows
    for size, kind in [(4 * KIB, "smooth"), (64 * KIB, "text"), (300 * KIB, "smooth"), (20 * KIB, "random")]:
        raw = make_data(kind, size, rng)
        it = _itemsize_for(kind, size, rng)
        add(
            "sound:no-content-size",
            zstandard.ZstdCompressor(level=3, write_content_size=False).compress(raw),
            raw,
            it,
            _zstd_config(),
        )
        add(
            "sound:zstandard-checksum",
            zstandard.ZstdCompressor(level=5, write_checksum=True).compress(raw),
            raw,
            it,
            _zstd_config(),
        )
        params = zstandard.ZstdCompressionParameters.from_level(3, window_log=10)
        add(
            "sound:window",
            zstandard.ZstdCompressor(compression_params=params).compress(raw),
            raw,
            it,
            _zstd_config(),
        )
        cobj = zstandard.ZstdCompressor(level=2, write_checksum=size > 50 * KIB).compressobj()
        add("sound:stream", cobj.compress(raw) + cobj.flush(), raw, it, _zstd_config())
    # edge cases: one element, constant (RLE blocks)
    for it in (1, 2, 4, 8):
        raw = make_data("random", it, rng)
        add("sound:one-element", numcodecs.Zstd(level=3).encode(raw), raw, it, _zstd_config())
    for size in (1000, 300 * KIB):
        raw = make_data("constant", size, rng)
        add(
            "sound:constant",
            numcodecs.Zstd(level=1).encode(raw),
            raw,
            8 if size % 8 == 0 else 1,
            _zstd_config(1),
        )
    # hand-made frames: compressed blocks of RLE or raw literals and no sequences, raw and RLE blocks
    for it, pieces in (
        (1, [("rle-literals", 700), ("raw", 300), ("rle", 5000)]),
        (4, [("rle-literals", 100000), ("raw-literals", 3000), ("rle-literals", 4)]),
    ):
        data, raw = handmade_zstd(pieces, rng)
        add("sound:handmade", data, raw, it, _zstd_config())
    # a handful of the largest chunks
    for kind in ("smooth", "zeros", "random")[: 3 if scale == "full" else 2]:
        raw = make_data(kind, 16 * MIB, rng)
        add("sound:16MiB", numcodecs.Zstd(level=1).encode(raw), raw, 4, _zstd_config(1))
    return out


def handmade_zstd(pieces: list[tuple[str, int]], rng: np.random.Generator) -> tuple[bytes, bytes]:
    """A single-segment frame of the blocks ``pieces`` names (``rle-literals`` and ``raw-literals``:
    compressed blocks of literals only; ``raw``, ``rle``: blocks of those types), and its content."""
    out, raw = [], []
    for k, (kind, n) in enumerate(pieces):
        last = int(k == len(pieces) - 1)
        value = make_data("random", 1 if kind.startswith("rle") else n, rng)
        if kind in ("rle-literals", "raw-literals"):
            ltype = 1 if kind == "rle-literals" else 0
            if n < 32:
                lh = bytes([ltype | n << 3])
            elif n < 4096:
                lh = (ltype | 1 << 2 | n << 4).to_bytes(2, "little")
            else:
                lh = (ltype | 3 << 2 | n << 4).to_bytes(3, "little")
            body = lh + value + b"\x00"  # no sequences
            out.append((last | 2 << 1 | len(body) << 3).to_bytes(3, "little") + body)
        elif kind == "raw":
            out.append((last | n << 3).to_bytes(3, "little") + value)
        else:
            out.append((last | 1 << 1 | n << 3).to_bytes(3, "little") + value)
        raw.append(value * n if kind.startswith("rle") else value)
    content = b"".join(raw)
    return zstd_header(single=True, fcs=len(content)) + b"".join(out), content


def _zstd_damage(rng: np.random.Generator, base: Case, raw: bytes, scale: str) -> Iterator[Case]:
    """Damaged variants of one sound single-frame zstd chunk."""
    data = base.data
    frames, sections = parse_zstd(data)
    (frame,) = frames
    big = len(raw) > 4 * MIB
    per = 1 if big else (2 if scale == "ci" else 6)

    def case(label, d, size=None):
        return replace(base, label=label, data=d, size=base.size if size is None else size)

    by_name: dict[str, list[Section]] = {}
    for s in sections:
        by_name.setdefault(s.name, []).append(s)
    if big:  # only a few cases of the largest: the last block's sequences, a flip and a cut
        last = [s for s in sections if s.name in ("sequence-bitstream", "raw-block")] or sections
        last = last[-1]
        yield case(f"flip:{last.name}", _flip_in(rng, data, last.start, last.end))
        yield case(f"truncate-in:{last.name}", data[: _inside(rng, last.start, last.end) or last.start])
        middle = by_name["block-header"][len(by_name["block-header"]) // 2]
        yield case("flip:block-header", _flip_in(rng, data, middle.start, middle.end))
        return
    for name in by_name:
        found = by_name[name]
        picks = rng.choice(len(found), min(per, len(found)), replace=False)
        for i in sorted(int(p) for p in picks):
            s = found[i]
            yield case(f"flip:{name}", _flip_in(rng, data, s.start, s.end))
            yield case(f"truncate:{name}", data[: s.start])
            cut = _inside(rng, s.start, s.end)
            if cut is not None:
                yield case(f"truncate-in:{name}", data[:cut])
    yield case("truncate:end-1", data[:-1])
    yield case("flip:anywhere", _flip_in(rng, data, 0, len(data)))

    # block fields
    blocks = frame.blocks
    chosen = sorted({0, len(blocks) - 1, int(rng.integers(0, len(blocks)))})
    for bi in chosen:
        b = blocks[bi]

        def header(last=b.last, btype=b.type, bsize=b.size, b=b):
            v = int(last) | btype << 1 | (bsize & 0x1FFFFF) << 3
            return put(data, b.header, v.to_bytes(3, "little"))

        yield case("block-size:+1", header(bsize=b.size + 1))
        if b.size > 0:
            yield case("block-size:-1", header(bsize=b.size - 1))
        yield case("block-size:max", header(bsize=0x1FFFFF))
        yield case("block-size:over-128KiB", header(bsize=128 * KIB + 1))
        for t, tname in enumerate(("raw", "rle", "compressed", "reserved")):
            if t != b.type:
                yield case(f"block-type:{tname}", header(btype=t))
        yield case("last-block:toggle", header(last=not b.last))
        if b.sequences is not None and b.sequences[2] > 0:
            s, nb, count = b.sequences
            for delta, dname in ((1, "+1"), (-1, "-1"), (count, "x2")):
                enc = _nseq(count + delta)
                if enc is not None and len(enc) == nb and count + delta > 0:
                    yield case(f"sequences-count:{dname}", put(data, s, enc))
        if b.literals is not None:
            q, hl, ltype, _ = b.literals
            h = int.from_bytes(data[q : q + hl], "little")
            if ltype >= 2:
                width = {3: 10, 4: 14, 5: 18}[hl]
                regen = (h >> 4) & ((1 << width) - 1)
                for delta, dname in ((1, "+1"), (-1, "-1"), (regen, "x2")):
                    new = regen + delta
                    if 0 < new < 1 << width:
                        h2 = (h & ~(((1 << width) - 1) << 4)) | new << 4
                        yield case(f"literals-size:{dname}", put(data, q, h2.to_bytes(hl, "little")))
            elif hl >= 2:  # raw/RLE literals with a 12- or 20-bit size
                regen = h >> 4
                h2 = (h & 0xF) | (regen + 1) << 4
                if (regen + 1) >> (8 * hl - 4) == 0:
                    yield case("literals-size:+1", put(data, q, h2.to_bytes(hl, "little")))
        if b.type == 1:  # an RLE block longer than the frame's content
            yield case("overrun:rle-block", header(bsize=b.size + base.itemsize))

    # header fields, by rewriting the header
    fcs = frame.fcs(data)
    did_at, did_n = frame.dict_id
    dict_id = int.from_bytes(data[did_at : did_at + did_n], "little")
    win = data[frame.window] if frame.window is not None else None
    body = data[frame.header_end :]

    def rewrite(label, size=None, tail=b"", **kw):
        args = dict(
            single=frame.single_segment,
            fcs=fcs,
            window=win,
            dict_id=dict_id,
            dict_bytes=did_n,
            checksum=frame.checksum,
        )
        args.update(kw)
        if not args["single"] and args["window"] is None:
            args["window"] = window_for(len(raw))
        return case(label, zstd_header(**args) + body + tail, size)

    n = len(raw)
    it = base.itemsize
    if fcs is not None:
        yield rewrite("content-size:+1", fcs=fcs + 1)
        yield rewrite("content-size:-1", fcs=fcs - 1)
        yield rewrite("content-size:x2", fcs=2 * fcs)
        yield rewrite("content-size:half", fcs=fcs // 2)
        yield rewrite("content-size:2^40", fcs=fcs + (1 << 40), fcs_bytes=8)
        # header and metadata agree on a size the data overruns (or underruns)
        if n > it:
            yield rewrite("overrun:content-size-1", size=n - it, fcs=n - it)
        if n >= 4 * it:
            half = (n // 2) // it * it
            yield rewrite("overrun:content-size-half", size=half, fcs=half)
        yield rewrite("underrun:content-size+1", size=n + it, fcs=n + it)
        yield rewrite("sound:content-size-8-bytes", fcs=n, fcs_bytes=8)
        if frame.single_segment:
            yield rewrite("sound:not-single-segment", single=False, window=window_for(n))
    else:  # only the metadata says the size
        if n > it:
            yield case("metadata-size:-1", data, n - it)
        yield case("metadata-size:+1", data, n + it)
        yield rewrite("sound:content-size-added", single=False, fcs=n, window=win)
    if not frame.single_segment:
        for log, mantissa in ((10, 0), (17, 3), (27, 7), (28, 0), (31, 0), (31, 7), (32, 0), (41, 7)):
            yield rewrite(f"window:log{log}.{mantissa}", window=window_byte(log, mantissa))
    # the reserved and unused bits of the descriptor (edited in place)
    yield case("frame-descriptor:reserved-bit", put(data, 4, bytes([data[4] | 0x08])))
    yield case("frame-descriptor:unused-bit", put(data, 4, bytes([data[4] | 0x10])))
    # dictionary ids
    if did_n:
        yield rewrite("dictionary-id:zero", dict_id=0)
        yield rewrite("dictionary-id:other", dict_id=dict_id ^ 0x5A)
        yield rewrite("dictionary-id:removed", dict_bytes=0, dict_id=0)
    else:
        yield rewrite("dictionary-id:added", dict_bytes=4, dict_id=int(rng.integers(1, 1 << 31)))
        yield rewrite("sound:dictionary-id-zero", dict_bytes=int(rng.choice([1, 2, 4])), dict_id=0)
    # checksum flag
    if frame.checksum:
        yield rewrite("checksum-flag:cleared", checksum=False)
        yield case("checksum:zeroed", put(data, len(data) - 4, bytes(4)))
    else:
        yield rewrite("checksum-flag:set", checksum=True)
        yield rewrite("checksum-flag:set+zeros", checksum=True, tail=bytes(4))
    # trailing bytes (refused by libzstd, zeros too)
    for t in (1, 4, 5, 8, 16):
        kind = ("zeros", "random")[t % 2]
        yield case(f"trailing:{t}", data + make_data(kind, t, rng))


def _nseq(count: int) -> bytes | None:
    """Number_of_Sequences as the sequences section header writes it."""
    if count < 0:
        return None
    if count < 128:
        return bytes([count])
    if count < 0x7F00:
        return bytes([(count >> 8) + 128, count & 0xFF])
    if count < 0x7F00 + 0x10000:
        return bytes([255]) + (count - 0x7F00).to_bytes(2, "little")
    return None


def _skippable(magic_nibble: int, content: bytes) -> bytes:
    return struct.pack("<II", 0x184D2A50 + magic_nibble, len(content)) + content


def _zstd_unusual(rng: np.random.Generator, scale: str) -> Iterator[Case]:
    """Several frames, skippable frames, dictionaries: valid chunks and their damage."""
    reps = 1 if scale == "ci" else 4
    cfg = _zstd_config()
    for _ in range(reps):
        for size, kind in ((12 * KIB, "smooth"), (64 * KIB, "text"), (256 * KIB, "runs"), (3000, "random")):
            raw = make_data(kind, size, rng)
            it = _itemsize_for(kind, size, rng)

            def case(label, d, size=size, it=it):
                return Case("zstd", label, d, size, it, cfg)

            a, b = raw[: size // 3], raw[size // 3 :]
            c = numcodecs.Zstd(level=3)
            fa, fb = c.encode(a), c.encode(b)
            yield case("concat-frames:2", fa + fb)
            third = [raw[: size // 4], raw[size // 4 : size // 2], raw[size // 2 :]]
            f3 = [c.encode(x) for x in third]
            yield case("concat-frames:3", b"".join(f3))
            nocs = zstandard.ZstdCompressor(write_content_size=False)
            yield case("concat-frames:mixed-content-size", fa + nocs.compress(b))
            yield case("concat-frames:no-content-size", nocs.compress(a) + nocs.compress(b))
            yield case("concat-frames:empty-frame", fa + c.encode(b"") + fb)
            yield case("concat-frames:extra", fa + fb + fb)
            yield case("concat-frames:missing", fa)
            yield case("concat-frames:truncated", fa + fb[: len(fb) // 2])
            yield case("concat-frames:trailing", fa + fb + b"\x00\x01\x02\x03\x04\x05")
            yield case("concat-frames:second-flipped", fa + _flip_in(rng, fb, 0, len(fb)))
            whole = c.encode(raw)
            skip = _skippable(int(rng.integers(0, 16)), make_data("random", int(rng.integers(0, 40)), rng))
            yield case("skippable:before", skip + whole)
            yield case("skippable:after", whole + skip)
            yield case("skippable:both", skip + whole + _skippable(15, b"z" * 9))
            yield case("skippable:between", fa + skip + fb)
            yield case("skippable:empty", _skippable(0, b"") + whole)
            yield case("skippable:only", skip)
            yield case("skippable:no-content-size", skip + nocs.compress(raw))
            over = struct.pack("<II", 0x184D2A50, len(whole) + 100) + whole
            yield case("skippable:oversize", over)
            yield case("skippable:truncated", whole + skip[: max(len(skip) - 1, 5)])
            bad = put(skip, 0, struct.pack("<I", 0x184D2A60))  # one past the skippable magics
            yield case("skippable:bad-magic", bad + whole)
            yield case("flip:skippable-magic", _flip_in(rng, skip, 0, 4) + whole)
            yield case("flip:skippable-size", _flip_in(rng, skip, 4, 8) + whole)
            if len(skip) > 8:
                yield case("flip:skippable-content", _flip_in(rng, skip, 8, len(skip)) + whole)
    # whole frames, then the start of another frame's header (numcodecs' Zstd loops for ever on those
    # whose frames lack a content size: numcodecs_hangs); after frames with content sizes it raises
    raw = make_data("text", 4 * KIB, rng)
    nocs = zstandard.ZstdCompressor(level=3, write_content_size=False)
    fcs, n, half = numcodecs.Zstd(level=3).encode(raw), nocs.compress(raw), 2 * KIB
    skip = _skippable(3, b"0123456789")
    mixed = numcodecs.Zstd(level=3).encode(raw[:half]) + nocs.compress(raw[half:])
    both = numcodecs.Zstd(level=3).encode(raw[:half]) + numcodecs.Zstd(level=3).encode(raw[half:])
    for head, name in ((n, "no-content-size"), (mixed, "mixed-content-size"), (both, "content-size")):
        for tail, what in (
            (fcs[:1], "magic-1"),
            (fcs[:4], "magic"),
            (fcs[:6], "frame-header"),
            (n[:5], "frame-header-no-content-size"),
            (skip[:2], "skippable-magic-2"),
            (skip[:7], "skippable-header"),
        ):
            if name != "no-content-size" and what not in ("magic", "skippable-header"):
                continue
            yield Case("zstd", f"next-frame-header:{name}:{what}", head + tail, 4 * KIB, 1, cfg)
    # dictionaries: a trained one (non-zero id) and a raw-content one (id 0)
    samples = [make_data("text", int(rng.integers(300, 2000)), rng) for _ in range(120)]
    trained = zstandard.train_dictionary(4096, samples, k=64, d=8, dict_id=0x1234ABCD, threads=0)
    small = zstandard.train_dictionary(2048, samples, k=64, d=8, dict_id=77, threads=0)
    rawdict = zstandard.ZstdCompressionDict(samples[0] + samples[1], dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    for size in (600, 4 * KIB, 30 * KIB):
        raw = make_data("text", size, rng)
        for name, d, did in (
            ("trained", trained, True),
            ("trained-1-byte-id", small, True),
            ("raw-content", rawdict, False),
        ):
            f = zstandard.ZstdCompressor(level=3, dict_data=d).compress(raw)
            yield Case("zstd", f"dictionary:{name}", f, size, 1, cfg)
            if did:
                frames, _ = parse_zstd(f)
                at, nb = frames[0].dict_id
                yield Case("zstd", "dictionary:id-zeroed", put(f, at, bytes(nb)), size, 1, cfg)
                yield Case("zstd", "flip:dictionary-id", _flip_in(rng, f, at, at + nb), size, 1, cfg)
            nodict = zstandard.ZstdCompressor(level=3, dict_data=d, write_dict_id=False).compress(raw)
            yield Case("zstd", f"dictionary:{name}-no-id", nodict, size, 1, cfg)
    # garbage and empty chunks
    for size in (KIB, 64 * KIB):
        raw = make_data("smooth", size, rng)
        f = numcodecs.Zstd(level=1).encode(raw)
        yield Case("zstd", "empty", b"", size, 4, cfg)
        yield Case("zstd", "garbage:same-length", make_data("random", len(f), rng), size, 4, cfg)
        yield Case(
            "zstd", "garbage:magic-then-random", f[:4] + make_data("random", len(f) - 4, rng), size, 4, cfg
        )
        yield Case("zstd", "garbage:zeros", bytes(len(f)), size, 4, cfg)
        yield Case("zstd", "truncate:header-only", f[: parse_zstd(f)[0][0].header_end], size, 4, cfg)
        yield Case("zstd", "raw-bytes", raw, size, 4, cfg)


def _thin(rng: np.random.Generator, cases: list[Case], base: Case, scale: str) -> list[Case]:
    """All of a small chunk's damaged variants; of a large one (stored over 64 KiB in "ci", 256 KiB in
    "full"), one of each label and at most 12 (24) in all, so that the corpus stays small."""
    limit, keep = (64 * KIB, 12) if scale == "ci" else (256 * KIB, 24)
    if len(base.data) <= limit:
        return cases
    one: dict[str, Case] = {}
    for c in cases:
        one.setdefault(c.label, c)
    picked = list(one.values())
    chosen = sorted(int(i) for i in rng.choice(len(picked), min(keep, len(picked)), replace=False))
    return [picked[i] for i in chosen]


def _zstd_cases(rng: np.random.Generator, scale: str) -> list[Case]:
    cases: list[Case] = []
    for base, raw in _zstd_base_cases(rng, scale):
        cases.append(base)
        cases.extend(_thin(rng, list(_zstd_damage(rng, base, raw, scale)), base, scale))
    cases.extend(_zstd_unusual(rng, scale))
    return cases


# ---------------------------------------------------------------------------------------------
# lz4, gzip, zlib


def _sized_bases(rng, scale, sizes_ci, sizes_full) -> Iterator[tuple[str, int, bytes, int]]:
    sizes = sizes_ci + (sizes_full if scale == "full" else [])
    k = 0
    for size in sizes:
        for kind in KINDS:
            if (k := k + 1) % 2 and size >= 256 * KIB:
                continue
            raw = make_data(kind, size, rng)
            yield kind, size, raw, _itemsize_for(kind, size, rng)
    for it in (1, 2, 4, 8):  # one-element chunks
        yield "random", it, make_data("random", it, rng), it


def _generic_damage(rng, base: Case, sections: list[tuple[str, int, int]], per: int) -> Iterator[Case]:
    """Flips in and truncations at/inside each named section, flips anywhere, trailing bytes,
    garbage, empty, and the metadata's size off by an element."""
    data = base.data

    def case(label, d, size=None):
        return replace(base, label=label, data=d, size=base.size if size is None else size)

    for name, a, b in sections:
        if b <= a:
            continue
        for _ in range(per):
            yield case(f"flip:{name}", _flip_in(rng, data, a, b))
        yield case(f"truncate:{name}", data[:a])
        cut = _inside(rng, a, b)
        if cut is not None:
            yield case(f"truncate-in:{name}", data[:cut])
    for _ in range(per):
        yield case("flip:anywhere", _flip_in(rng, data, 0, len(data)))
    at = int(rng.integers(0, len(data)))
    yield case("overwrite:4-bytes", put(data, at, make_data("random", 4, rng))[: len(data)])
    yield case("truncate:end-1", data[:-1])
    for t in (1, 5, 16):
        yield case(f"trailing:{t}", data + make_data(("zeros", "random")[t % 2], t, rng))
    yield case("empty", b"")
    yield case("garbage:same-length", make_data("random", len(data), rng))
    it = base.itemsize
    if base.size > it:
        yield case("metadata-size:-1", data, base.size - it)
    yield case("metadata-size:+1", data, base.size + it)


def _lz4_cases(rng, scale) -> list[Case]:
    cases = []
    cfg = numcodecs.LZ4(acceleration=1).get_config()
    per = 1 if scale == "ci" else 4
    for kind, size, raw, it in _sized_bases(rng, scale, [KIB, 20 * KIB, 300 * KIB], [4 * KIB, 2 * MIB]):
        data = numcodecs.LZ4(acceleration=1).encode(raw)
        base = Case("lz4", "sound" if size > 8 else "sound:one-element", data, size, it, cfg)
        cases.append(base)
        if size <= 8 and kind == "random" and it < 8:
            continue
        sections = [("lz4-size", 0, 4), ("lz4-block", 4, len(data))]
        cases += _thin(rng, list(_generic_damage(rng, base, sections, per)), base, scale)
        prefix = lambda v, d=data: struct.pack("<i", v) + d[4:]  # noqa: E731
        cases.append(replace(base, label="lz4-size:+1", data=prefix(size + 1)))
        cases.append(replace(base, label="lz4-size:-1", data=prefix(size - 1)))
        cases.append(replace(base, label="lz4-size:negative", data=prefix(-size)))
        cases.append(replace(base, label="lz4-size:zero", data=prefix(0)))
        if size > it:  # header and metadata agree on a size the block overruns
            cases.append(replace(base, label="overrun:lz4-size-1", data=prefix(size - it), size=size - it))
        cases.append(replace(base, label="underrun:lz4-size+1", data=prefix(size + it), size=size + it))
        cases.append(replace(base, label="lz4-size:big-endian", data=struct.pack(">i", size) + data[4:]))
        cases.append(
            replace(base, label="garbage:valid-size", data=data[:4] + make_data("random", len(data) - 4, rng))
        )
    return cases


def _gzip_sections(data: bytes) -> list[tuple[str, int, int]]:
    n = len(data)
    return [
        ("gzip-magic", 0, 2),
        ("gzip-method", 2, 3),
        ("gzip-flags", 3, 4),
        ("gzip-mtime", 4, 8),
        ("gzip-xfl-os", 8, 10),
        ("deflate", 10, n - 8),
        ("gzip-crc32", n - 8, n - 4),
        ("gzip-isize", n - 4, n),
    ]


def _gzip_member(raw: bytes, level: int, flags: int = 0, extra: bytes = b"") -> bytes:
    """A gzip member with header flags (FEXTRA 4, FNAME 8, FCOMMENT 16, FHCRC 2) as gzip(1) writes."""
    co = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = co.compress(raw) + co.flush()
    head = b"\x1f\x8b\x08" + bytes([flags]) + b"\x00\x00\x00\x00\x00\xff"
    if flags & 4:
        head += struct.pack("<H", len(extra)) + extra
    if flags & 8:
        head += b"chunk.bin\x00"
    if flags & 16:
        head += b"a comment\x00"
    if flags & 2:
        head += struct.pack("<H", zlib.crc32(head) & 0xFFFF)
    return head + body + struct.pack("<II", zlib.crc32(raw), len(raw) & 0xFFFFFFFF)


def _gzip_cases(rng, scale) -> list[Case]:
    cases = []
    per = 1 if scale == "ci" else 4
    k = 0
    for _, size, raw, it in _sized_bases(rng, scale, [KIB, 20 * KIB, 300 * KIB], [4 * KIB, 2 * MIB]):
        level = (1, 5, 9, 0)[k % 4]
        k += 1
        codec = numcodecs.GZip(level=level)
        cfg = codec.get_config()
        data = put(codec.encode(raw), 4, bytes(4))  # MTIME: numcodecs writes the time; 0 is "none"
        base = Case("gzip", "sound" if size > 8 else "sound:one-element", data, size, it, cfg)
        cases.append(base)
        if size <= 8 and it < 8:
            continue
        cases += _thin(rng, list(_generic_damage(rng, base, _gzip_sections(data), per)), base, scale)
        n = len(data)
        isize, crc = struct.unpack_from("<II", data, n - 8)
        cases.append(
            replace(base, label="gzip-isize:+1", data=put(data, n - 4, struct.pack("<I", isize + 1)))
        )
        cases.append(
            replace(base, label="gzip-crc32:+1", data=put(data, n - 8, struct.pack("<I", (crc + 1) % 2**32)))
        )
        if size > it:
            cases.append(
                replace(
                    base,
                    label="overrun:gzip-isize-1",
                    data=put(data, n - 4, struct.pack("<I", size - it)),
                    size=size - it,
                )
            )
        for t in (4, 16):
            cases.append(replace(base, label=f"trailing:zeros-{t}", data=data + bytes(t)))
        cases.append(replace(base, label="gzip-flags:fname-unset", data=put(data, 3, b"\x08")))
        for flags, name in ((8, "fname"), (16, "fcomment"), (4, "fextra"), (2, "fhcrc"), (30, "all")):
            m = _gzip_member(raw, 6, flags, b"AB\x02\x00xy")
            cases.append(replace(base, label=f"sound:gzip-header-{name}", data=m))
        m = _gzip_member(raw, 6, 2)
        cases.append(replace(base, label="gzip-header:fhcrc-flipped", data=flip(m, 10, 3)))
        half = size // 2
        two = _gzip_member(raw[:half], 6) + _gzip_member(raw[half:], 1)
        cases.append(replace(base, label="concat-members:2", data=two))
        cases.append(replace(base, label="concat-members:second-truncated", data=two[:-3]))
        cases.append(replace(base, label="concat-members:extra", data=data + data))
    return cases


def _zlib_cases(rng, scale) -> list[Case]:
    cases = []
    per = 1 if scale == "ci" else 4
    k = 0
    for _, size, raw, it in _sized_bases(rng, scale, [KIB, 20 * KIB, 300 * KIB], [4 * KIB, 2 * MIB]):
        level = (1, 6, 9, 0)[k % 4]
        k += 1
        codec = numcodecs.Zlib(level=level)
        cfg = codec.get_config()
        data = codec.encode(raw)
        base = Case("zlib", "sound" if size > 8 else "sound:one-element", data, size, it, cfg)
        cases.append(base)
        if size <= 8 and it < 8:
            continue
        n = len(data)
        sections = [("zlib-header", 0, 2), ("deflate", 2, n - 4), ("zlib-adler32", n - 4, n)]
        cases += _thin(rng, list(_generic_damage(rng, base, sections, per)), base, scale)
        adler = struct.unpack_from(">I", data, n - 4)[0]
        cases.append(
            replace(
                base, label="zlib-adler32:+1", data=put(data, n - 4, struct.pack(">I", (adler + 1) % 2**32))
            )
        )

        def header(cmf, flg, d=data):
            flg = (flg & 0xE0) | (31 - ((cmf << 8 | (flg & 0xE0)) % 31)) % 31
            return bytes([cmf, flg]) + d[2:]

        cmf, flg = data[0], data[1]
        cases.append(replace(base, label="zlib-header:fdict", data=header(cmf, flg | 0x20)))
        cases.append(
            replace(
                base, label="sound:zlib-header-level", data=header(cmf, (flg & 0x1F) | ((flg >> 6) ^ 3) << 6)
            )
        )
        for cinfo in (0, 2, 7, 8):
            if cinfo != cmf >> 4:
                cases.append(
                    replace(base, label=f"zlib-header:window-{cinfo}", data=header(cinfo << 4 | 8, flg))
                )
        cases.append(replace(base, label="zlib-header:method-15", data=header(cmf | 0x0F, flg)))
        cases.append(replace(base, label="zlib-header:fcheck", data=put(data, 1, bytes([flg ^ 1]))))
        cases.append(replace(base, label="zlib:raw-deflate", data=data[2:-4]))
        cases.append(replace(base, label="concat-streams:2", data=data + data))
    return cases


def zlib_array(path, shape: tuple[int, ...], chunks: tuple[int, ...], damaged: str | None = None):
    """A zarr v2 float64 array of numcodecs zlib chunks at ``path``, values written; the chunk file
    ``damaged`` (a key) with one byte in its middle flipped."""
    import zarr

    from .helpers import sample

    a = zarr.create_array(
        path, shape=shape, chunks=chunks, dtype="f8", zarr_format=2, compressors=numcodecs.Zlib(1)
    )
    a[...] = sample(shape, "f8")
    if damaged is not None:
        chunk = path / damaged
        data = bytearray(chunk.read_bytes())
        data[len(data) // 2] ^= 0xFF
        chunk.write_bytes(bytes(data))
    return a


# ---------------------------------------------------------------------------------------------
# Deflate streams built bit by bit: every way a block can break, in zlib and gzip wrappers


class _BitWriter:
    """A Deflate bit writer: fields least significant bit first, Huffman codes most significant first."""

    def __init__(self) -> None:
        self.acc, self.n, self.out = 0, 0, bytearray()

    def put(self, value: int, count: int) -> "_BitWriter":
        self.acc |= value << self.n
        self.n += count
        while self.n >= 8:
            self.out.append(self.acc & 0xFF)
            self.acc >>= 8
            self.n -= 8
        return self

    def code(self, code: int, length: int) -> "_BitWriter":
        return self.put(int(f"{code:0{length}b}"[::-1], 2), length)

    def align(self) -> "_BitWriter":
        return self.put(0, -self.n % 8)

    def done(self) -> bytes:
        return bytes(self.out) + (bytes([self.acc]) if self.n else b"")


def _canonical(lengths: list[int]) -> dict[int, tuple[int, int]]:
    """Canonical Huffman codes (RFC 1951 3.2.2) of the symbols of nonzero ``lengths``: symbol -> (code,
    length)."""
    count = collections.Counter(n for n in lengths if n)
    code, nxt = 0, {}
    for bits in range(1, max(lengths, default=0) + 1):
        code = (code + count[bits - 1]) << 1
        nxt[bits] = code
    out = {}
    for sym, n in enumerate(lengths):
        if n:
            out[sym] = (nxt[n], n)
            nxt[n] += 1
    return out


_CLEN_ORDER = (16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15)
_A, _B, _C = 97, 98, 99


def _dynamic(
    lit: dict[int, int] | None = None,
    dist: dict[int, int] | None = None,
    clen: dict[int, int] | None = None,
    hlit: int | None = None,
    hdist: int | None = None,
    lengths_prefix: tuple[tuple[int, int, int], ...] = (),
    body: tuple[tuple[str, int], ...] = (
        ("lit", _A),
        ("lit", _B),
        ("lit", _A),
        ("lit", _B),
        ("len", 257),
        ("dist", 1),
    ),
) -> bytes:
    """A final dynamic-Huffman block: literal/length code lengths ``lit`` (symbol -> length; by default
    'a', 'b', end-of-block and length 3, two bits each), distance code lengths ``dist`` (by default
    distances 1 and 2, one bit each), code-length code lengths ``clen`` (by default 0 to 15, four bits
    each: complete), the header's symbol counts, code-length symbols sent before the lengths
    (``lengths_prefix``: (symbol, extra bits, their count)), then ``body`` and end-of-block."""
    lit = {_A: 2, _B: 2, 256: 2, 257: 2} if lit is None else lit
    dist = {0: 1, 1: 1} if dist is None else dist
    clen = {s: 4 for s in range(16)} if clen is None else clen
    nlit, ndist = max(max(lit) + 1, 257), max(max(dist, default=0) + 1, 1)
    lit_lengths = [lit.get(s, 0) for s in range(nlit)]
    dist_lengths = [dist.get(s, 0) for s in range(ndist)]
    clen_lengths = [clen.get(s, 0) for s in range(19)]
    bits = _BitWriter().put(1, 1).put(2, 2)
    bits.put((nlit if hlit is None else hlit) - 257, 5).put((ndist if hdist is None else hdist) - 1, 5)
    bits.put(19 - 4, 4)
    for s in _CLEN_ORDER:
        bits.put(clen_lengths[s], 3)
    cl = _canonical(clen_lengths)
    for sym, extra, nbits in lengths_prefix:
        bits.code(*cl[sym]).put(extra, nbits)
    for n in lit_lengths + dist_lengths:
        bits.code(*cl[n])
    codes, dcodes = _canonical(lit_lengths), _canonical(dist_lengths)
    for kind, sym in body:
        bits.code(*(dcodes if kind == "dist" else codes)[sym])
    if 256 in codes:
        bits.code(*codes[256])
    return bits.done()


def _fixed(symbols: tuple[tuple[str, int], ...]) -> bytes:
    """A final fixed-Huffman block of ``symbols`` (("lit", byte or length symbol) or ("dist", code)),
    then end-of-block."""
    bits = _BitWriter().put(1, 1).put(1, 2)
    for kind, v in (*symbols, ("lit", 256)):
        if kind == "dist":
            bits.code(v, 5)
        elif v < 144:
            bits.code(0x30 + v, 8)
        elif v < 256:
            bits.code(0x190 + v - 144, 9)
        elif v < 280:
            bits.code(v - 256, 7)
        else:
            bits.code(0xC0 + v - 280, 8)
    return bits.done()


def _stored(payload: bytes, length: int | None = None, nlength: int | None = None) -> bytes:
    n = len(payload) if length is None else length
    nn = (~n & 0xFFFF) if nlength is None else nlength
    return _BitWriter().put(1, 1).put(0, 2).align().done() + struct.pack("<HH", n, nn) + payload


def deflate_damage() -> list[tuple[str, bytes]]:
    """Raw Deflate streams, each one way a block breaks (or an unusual sound one, ``sound:``), as
    (label, stream); zlib's inflate is the judge of each (its message in the comment)."""
    ab = (("lit", _A), ("lit", _B), ("lit", _A), ("lit", _B))
    return [
        ("sound:dynamic-block", _dynamic()),
        ("sound:one-distance-code", _dynamic(dist={1: 1})),  # an incomplete code of one symbol: allowed
        ("sound:fixed-block", _fixed((*ab, ("lit", 257), ("dist", 1)))),
        ("sound:stored-block", _stored(b"abcdefg")),
        (
            "deflate-block:reserved-type",
            _BitWriter().put(1, 1).put(3, 2).put(0, 16).done(),
        ),  # invalid block type
        ("deflate-stored:nlen", _stored(b"abcdefg", nlength=0x1234)),  # invalid stored block lengths
        ("deflate-stored:len-past-end", _stored(b"abcdefg", length=100)),  # truncated
        ("deflate-header:hlit-287", _dynamic(hlit=287)),  # too many length or distance symbols
        ("deflate-header:hdist-31", _dynamic(hdist=31)),
        ("deflate-clen:oversubscribed", _dynamic(clen={s: 3 for s in range(16)})),  # invalid code lengths set
        ("deflate-clen:incomplete", _dynamic(clen={s: 4 for s in range(15)} | {15: 0})),
        (  # invalid bit length repeat: code 16 repeats a length before there is one
            "deflate-clen:repeat-first",
            _dynamic(clen={s: 4 for s in range(15)} | {16: 4}, lengths_prefix=((16, 0, 2),)),
        ),
        (  # invalid bit length repeat: code 18 repeats zero past the lengths' end
            "deflate-clen:repeat-past-end",
            _dynamic(clen={s: 4 for s in range(15)} | {18: 4}, lengths_prefix=((18, 127, 7), (18, 127, 7))),
        ),
        (
            "deflate-lit:oversubscribed",
            _dynamic(lit={_A: 2, _B: 2, _C: 2, 256: 2, 257: 2}),
        ),  # invalid literal/lengths set
        ("deflate-lit:incomplete", _dynamic(lit={_A: 2, _B: 2, 256: 2, 257: 3})),
        ("deflate-lit:no-end-of-block", _dynamic(lit={_A: 2, _B: 2, _C: 2, 257: 2})),  # missing end-of-block
        ("deflate-dist:oversubscribed", _dynamic(dist={0: 1, 1: 1, 2: 1})),  # invalid distances set
        ("deflate-dist:incomplete", _dynamic(dist={0: 1, 1: 2})),
        (
            "deflate-dist:past-output-start",
            _dynamic(body=(("lit", _A), ("len", 257), ("dist", 1))),
        ),  # too far back
        ("deflate-fixed:length-286", _fixed((*ab, ("lit", 286)))),  # invalid literal/length code
        ("deflate-fixed:length-287", _fixed((*ab, ("lit", 287)))),
        ("deflate-fixed:distance-30", _fixed((*ab, ("lit", 257), ("dist", 30)))),  # invalid distance code
        ("deflate-fixed:no-end", _fixed(ab)[:-1]),  # truncated inside the block
        ("deflate:empty", b""),
    ]


def _deflate_cases(rng, scale) -> list[Case]:
    """``deflate_damage``'s streams in zlib and gzip wrappers (the checksums of what a sound stream
    decodes to), at the size the sound stream decodes to, below it and above it (the output runs past
    the chunk's end, or stops short of it)."""
    cases = []
    for label, raw in deflate_damage():
        try:
            out = zlib.decompress(raw, -15)
        except zlib.error:
            out = b"abab" + b"bab"
        for codec, cfg in (
            ("zlib", numcodecs.Zlib(1).get_config()),
            ("gzip", numcodecs.GZip(1).get_config()),
        ):
            if codec == "zlib":
                data = b"\x78\x01" + raw + struct.pack(">I", zlib.adler32(out))
            else:
                head = b"\x1f\x8b\x08\x00" + bytes(4) + b"\x00\xff"
                data = head + raw + struct.pack("<II", zlib.crc32(out), len(out))
            cases.append(Case(codec, label, data, len(out), 1, cfg))
            if label.startswith("sound:") and len(out) > 1:
                cases.append(
                    Case(codec, f"deflate-size:{label[6:]}-past-chunk-end", data, len(out) - 1, 1, cfg)
                )
                cases.append(
                    Case(codec, f"deflate-size:{label[6:]}-short-of-chunk-end", data, len(out) + 1, 1, cfg)
                )
    return cases


# ---------------------------------------------------------------------------------------------
# blosc


def blosc_streams(data: bytes) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The block offset table entries and the split streams (each a 4-byte size, then its bytes) of
    a sound blosc1 chunk, as (offset, length) pairs; empty for copy-only (memcpyed) chunks."""
    flags, ts = data[2], data[3]
    nbytes, bs, cbytes = struct.unpack_from("<iii", data, 4)
    if flags & 0x02 or nbytes == 0:
        return [], []
    nblocks = -(-nbytes // bs)
    table = [(16 + 4 * j, 4) for j in range(nblocks)]
    streams = []
    for j in range(nblocks):
        start = struct.unpack_from("<i", data, 16 + 4 * j)[0]
        leftover = j == nblocks - 1 and nbytes % bs
        split = not (flags & 0x10) and ts <= 16 and bs // ts >= 128 and not leftover
        nsplits = ts if split else 1
        p = start
        for _ in range(nsplits):
            (cs,) = struct.unpack_from("<i", data, p)
            streams.append((p, 4 + cs))
            p += 4 + cs
    if not streams or streams[-1][0] + streams[-1][1] > cbytes:
        raise ParseError("blosc streams run past cbytes")
    return table, streams


_BLOSC_CNAMES = {
    "blosc-lz4": "lz4",
    "blosc-lz4hc": "lz4hc",
    "blosc-zstd": "zstd",
    "blosc-zlib": "zlib",
    "blosc-blosclz": "blosclz",
}


def _blosc_cases(rng, scale) -> list[Case]:
    cases = []
    per = 1 if scale == "ci" else 3
    sizes = [KIB, 16 * KIB, 200 * KIB] + ([2 * MIB, 64 * KIB] if scale == "full" else [])
    k = 0
    for codec, cname in _BLOSC_CNAMES.items():
        for shuffle in (0, 1, 2):
            for ts in (1, 2, 4, 8):
                k += 1
                size = sizes[k % len(sizes)]
                kind = KINDS[k % len(KINDS)]
                raw = make_data(kind, size, rng)
                blocksize = (0, 0, 4096)[k % 3]
                clevel = 0 if k % 9 == 4 else (5, 1, 9)[k % 3]
                coder = numcodecs.Blosc(cname=cname, clevel=clevel, shuffle=shuffle, blocksize=blocksize)
                data = coder.encode(np.frombuffer(raw, f"<u{ts}"))
                base = Case(codec, "sound", data, size, ts, coder.get_config())
                cases.append(base)
                cases += _thin(rng, list(_blosc_damage(rng, base, per)), base, scale)
                one = make_data("random", ts, rng)
                d1 = coder.encode(np.frombuffer(one, f"<u{ts}"))
                cases.append(Case(codec, "sound:one-element", d1, ts, ts, coder.get_config()))
                cases.append(Case(codec, "trailing:16", d1 + bytes(16), ts, ts, coder.get_config()))
    return cases


def _blosc_damage(rng, base: Case, per: int) -> Iterator[Case]:
    data = base.data
    n = len(data)

    def case(label, d, size=None):
        return replace(base, label=label, data=d, size=base.size if size is None else size)

    def field(name, value: int, fmt: str):
        off = next(o for nm, o, _ in BLOSC_FIELDS if nm == name)
        return put(data, off, struct.pack(fmt, value))

    for name, off, length in BLOSC_FIELDS:
        yield case(f"flip:blosc-{name}", _flip_in(rng, data, off, off + length))
    table, streams = blosc_streams(data)
    sections = [("blosc-header", 0, 16)]
    if table:
        sections.append(("blosc-bstarts", 16, 16 + 4 * len(table)))
    for name, a, b in sections:
        yield case(f"truncate-in:{name}", data[: _inside(rng, a, b)])
    if table:
        yield case("truncate:blosc-bstarts", data[:16])
        for _ in range(per):
            at, _len = table[int(rng.integers(0, len(table)))]
            yield case("flip:blosc-bstarts", _flip_in(rng, data, at, at + 4))
        at, _len = table[-1]
        yield case("blosc-bstarts:past-cbytes", put(data, at, struct.pack("<i", n + 8)))
        yield case("blosc-bstarts:zero", put(data, at, struct.pack("<i", 0)))
        if len(table) > 1:
            a0 = data[16:20]
            yield case(
                "blosc-bstarts:swapped",
                put(put(data, 16, data[table[-1][0] : table[-1][0] + 4]), table[-1][0], a0),
            )
        picks = rng.choice(len(streams), min(per, len(streams)), replace=False)
        for i in sorted(int(p) for p in picks):
            at, length = streams[i]
            yield case("flip:blosc-stream-size", _flip_in(rng, data, at, at + 4))
            yield case("blosc-stream-size:+1", put(data, at, struct.pack("<i", length - 4 + 1)))
            yield case("blosc-stream-size:-1", put(data, at, struct.pack("<i", length - 4 - 1)))
            if length > 4:
                yield case("flip:blosc-stream", _flip_in(rng, data, at + 4, at + length))
                yield case("truncate-in:blosc-stream", data[: _inside(rng, at + 4, at + length) or at + 4])
            yield case("truncate:blosc-stream", data[:at])
    else:  # copy-only
        yield case("flip:blosc-copied-data", _flip_in(rng, data, 16, n) if n > 16 else data)
    it = base.itemsize
    yield case("blosc-nbytes:+1", field("nbytes", base.size + it, "<i"))
    yield case("metadata-size:+1", data, base.size + it)
    if base.size > it:
        yield case("metadata-size:-1", data, base.size - it)
    yield case("blosc-cbytes:+1", field("cbytes", n + 1, "<i"))
    yield case("blosc-cbytes:-1", field("cbytes", n - 1, "<i"))
    yield case("blosc-blocksize:x2", field("blocksize", struct.unpack_from("<i", data, 8)[0] * 2, "<i"))
    yield case(
        "blosc-blocksize:half", field("blocksize", max(struct.unpack_from("<i", data, 8)[0] // 2, 1), "<i")
    )
    yield case("blosc-blocksize:zero", field("blocksize", 0, "<i"))
    yield case("blosc-typesize:zero", field("typesize", 0, "<B"))
    yield case("blosc-version:3", field("version", 3, "<B"))
    yield case("blosc-version:1", field("version", 1, "<B"))  # c-blosc 1.x reads format version 2 only
    yield case("blosc-typesize:+1", field("typesize", data[3] % 255 + 1, "<B"))
    flags = data[2]
    for bit, name in ((0x01, "shuffle"), (0x02, "memcpyed"), (0x04, "bitshuffle"), (0x10, "dont-split")):
        yield case(f"blosc-flags:{name}", field("flags", flags ^ bit, "<B"))
    compcode = flags >> 5
    for code, name in ((0, "blosclz"), (1, "lz4"), (3, "zlib"), (4, "zstd"), (7, "reserved")):
        if code != compcode:
            yield case(f"blosc-compcode:{name}", field("flags", (flags & 0x1F) | code << 5, "<B"))
    for t in (1, 7, 16, 33, 64):  # valid: older writers pad after the payload
        yield case(f"trailing:{t}", data + make_data(("zeros", "random")[t % 2], t, rng))
    yield case("trailing:16+cbytes", put(data + bytes(16), 12, struct.pack("<i", n + 16)))
    yield case("truncate:end-1", data[:-1])
    yield case("empty", b"")
    yield case("garbage:same-length", make_data("random", n, rng))
    yield case("garbage:header-kept", data[:16] + make_data("random", n - 16, rng))


# ---------------------------------------------------------------------------------------------


def corpus(seed: int = 0, scale: str = "ci") -> list[Case]:
    """Sound and damaged chunks of every codec in ``CODECS``, deterministic from ``seed``.

    ``scale="ci"`` stays fast (a few seconds on 2 cores); ``"full"`` adds sizes and repeats.
    """
    if scale not in ("ci", "full"):
        raise ValueError(f"scale must be 'ci' or 'full', not {scale!r}")
    makers: list[tuple[str, Callable]] = [
        ("zstd", _zstd_cases),
        ("lz4", _lz4_cases),
        ("gzip", _gzip_cases),
        ("zlib", _zlib_cases),
        ("blosc", _blosc_cases),
        ("deflate", _deflate_cases),
    ]
    out: list[Case] = []
    for i, (_, make) in enumerate(makers):
        out += make(np.random.default_rng([seed, i]), scale)
    for c in out:
        if c.size <= 0 or c.size % c.itemsize:
            raise AssertionError(f"bad case {c.codec} {c.label}: size {c.size}, itemsize {c.itemsize}")
    return out
