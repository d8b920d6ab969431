"""Bounded host decodes with the reference libraries: the verdict on what the device decoders leave.

The GPU path decodes gzip and zlib streams here (nvCOMP's Deflate cannot be shown safe on damaged
streams without decoding them: docs/design.md), the rare zstd frames its kernels do not take
(offset codes over 26: windows over 128 MiB), and every item a device decoder refused: the device
decoders accept only well-formed streams, which every conforming decoder decodes alike, and leave
the rest to the library zarr-python calls, whose verdict on damaged data (libzstd and liblz4 decode
some damaged streams to bytes of the right size) is then the package's. Each decode writes at most
the chunk's size, whatever the stream claims, but for zstd frames without a content size, which
numcodecs streams as zarr-python does (its output grows with what the blocks decode to). The
libraries: numcodecs' GZip (Python's gzip module: several members, zero padding after them), Zlib
(``zlib.decompress``: bytes after the stream ignored, the Adler-32 verified), Zstd (libzstd), LZ4
(liblz4's ``LZ4_decompress_safe``, as c-blosc calls it for its streams too) and Blosc (c-blosc).
Deflate streams are inflated by zlib-ng, zlib's inflate made faster (about twice its pace), through
its package's copy of Python's ``zlib`` module: zlib's verdict on every stream; gzip members are read
as Python's gzip module reads them (numcodecs' reader), their raw streams inflated by zlib-ng
(tests/codecs/test_reference.py holds both to Python's modules over thousands of damaged streams).
libdeflate and ISA-L are faster still but decode streams zlib refuses: docs/decisions/host-inflate.md.
Each ``*_into`` here decodes a chunk that passed its host check; ``compressions.decode_into`` runs
both. The ``*_at_most`` functions decode the streams that state no size (gzip, zlib, and numcodecs'
BZ2 and LZMA, as Python's modules read them) to a bound: ``stored`` calls them for every chain the
host decodes, where zarr-python would inflate whatever the stream holds.
"""

import bz2
import gzip
import lzma
import struct
import zlib
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
from numcodecs import LZ4, Blosc, Zstd
from zlib_ng import zlib_ng


def gzip_at_most(data: bytes | memoryview, limit: int, config: Mapping[str, Any] | None = None) -> bytes:
    """A gzip chunk decoded to at most ``limit`` bytes, member by member as Python's ``gzip.GzipFile``
    reads it (numcodecs' GZip): each header's magic, method and optional fields (the header CRC
    skipped, not checked), the raw Deflate stream, its CRC-32 and ISIZE, zero padding; the inflating
    by zlib-ng."""
    data = bytes(data)
    view = memoryview(data)
    parts: list[bytes] = []
    total, pos, n = 0, 0, len(data)
    while pos < n and total <= limit:
        p = _gzip_header(data, pos)
        d = zlib_ng.decompressobj(-zlib_ng.MAX_WBITS)
        raw = d.decompress(view[p:], limit + 1 - total)
        parts.append(raw)
        total += len(raw)
        if total > limit:
            break
        if not d.eof:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        tail = d.unused_data
        if len(tail) < 8:
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        crc, isize = struct.unpack_from("<II", tail)
        if crc != zlib_ng.crc32(raw):
            raise gzip.BadGzipFile("CRC check failed")
        if isize != len(raw) & 0xFFFFFFFF:
            raise gzip.BadGzipFile("Incorrect length of data produced")
        pos = n - len(tail) + 8
        while pos < n and data[pos] == 0:  # zero padding after a member
            pos += 1
    if total > limit:
        raise ValueError(f"gzip stream decodes to more than {limit} bytes")
    return b"".join(parts)


def _gzip_header(data: bytes, pos: int) -> int:
    """Where the Deflate stream of the gzip member at ``pos`` starts, its header checked as Python's
    ``gzip`` module checks it."""
    if data[pos : pos + 2] != b"\x1f\x8b":
        raise gzip.BadGzipFile(f"Not a gzipped file ({data[pos : pos + 2]!r})")
    p = _need(data, pos + 2, 8)
    method, flag = data[pos + 2], data[pos + 3]
    if method != 8:
        raise gzip.BadGzipFile("Unknown compression method")
    if flag & 4:  # FEXTRA
        q = _need(data, p, 2)
        p = _need(data, q, int.from_bytes(data[p:q], "little"))
    for field in (8, 16):  # FNAME, FCOMMENT: to a zero byte, or to the end
        if flag & field:
            end = data.find(b"\0", p)
            p = len(data) if end < 0 else end + 1
    if flag & 2:  # FHCRC: skipped
        p = _need(data, p, 2)
    return p


def _need(data: bytes, p: int, k: int) -> int:
    if p + k > len(data):
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    return p + k


def zlib_at_most(data: bytes | memoryview, limit: int, config: Mapping[str, Any] | None = None) -> bytes:
    """A zlib stream (bytes after it ignored, the Adler-32 verified), decoded to at most ``limit``."""
    d = zlib_ng.decompressobj()
    raw = d.decompress(data, limit + 1)
    if len(raw) > limit:
        raise ValueError(f"zlib stream decodes to more than {limit} bytes")
    if not d.eof:
        raise ValueError("zlib stream is truncated")
    return raw


def _streams_at_most(name: str, new: Callable[[], Any], data: bytes | memoryview, limit: int) -> bytes:
    # bz2 and xz chunks may hold several streams one after another, read as bz2.decompress and
    # lzma.decompress read them (bytes after a stream that do not start another are ignored): each
    # decoded with the room the ones before it left
    parts: list[bytes] = []
    rest, total = bytes(data), 0
    while True:
        d = new()
        try:
            raw = d.decompress(rest, limit + 1 - total)
        except (OSError, lzma.LZMAError):
            if parts:
                return b"".join(parts)
            raise
        total += len(raw)
        parts.append(raw)
        if total > limit:
            raise ValueError(f"{name} stream decodes to more than {limit} bytes")
        if not d.eof:
            raise ValueError(f"{name} stream is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(parts)


def bz2_at_most(data: bytes | memoryview, limit: int, config: Mapping[str, Any] | None = None) -> bytes:
    """A bz2 chunk (numcodecs' BZ2), decoded to at most ``limit`` bytes."""
    return _streams_at_most("bz2", bz2.BZ2Decompressor, data, limit)


def lzma_at_most(data: bytes | memoryview, limit: int, config: Mapping[str, Any] | None = None) -> bytes:
    """An lzma chunk (numcodecs' LZMA: its ``format`` and ``filters``), decoded to at most ``limit``."""
    conf = config or {}
    fmt, filters = conf.get("format", lzma.FORMAT_AUTO), conf.get("filters")
    return _streams_at_most("lzma", lambda: lzma.LZMADecompressor(format=fmt, filters=filters), data, limit)


AtMost = Callable[[bytes | memoryview, int, Mapping[str, Any] | None], bytes]


def wrong_size(name: str, got: int, want: int) -> str | None:
    """Why a stream that decoded to ``got`` bytes is not a chunk of ``want``, or None."""
    return None if got == want else f"{name} stream decodes to {got} bytes, metadata says {want}"


def _exactly(name: str, at_most: AtMost, data: bytes | memoryview, out: np.ndarray) -> str | None:
    raw = at_most(data, out.nbytes, None)
    why = wrong_size(name, len(raw), out.nbytes)
    if why is None:
        out[:] = np.frombuffer(raw, np.uint8)
    return why


def gzip_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    return _exactly("gzip", gzip_at_most, data, out)


def zlib_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    return _exactly("zlib", zlib_at_most, data, out)


def zstd_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    # as zarr-python calls it: with ``out``, numcodecs reads small or large windows that its own
    # decode refuses. The header check bounded every stated size by n; frames without one are
    # streamed as zarr-python streams them
    raw = Zstd().decode(data)
    why = wrong_size("zstd", len(raw), out.nbytes)
    if why is None:
        out[:] = np.frombuffer(raw, np.uint8)
    return why


def lz4_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    out[:] = np.frombuffer(LZ4().decode(data), np.uint8)  # the header check made its size n's
    return None


def lz4_block_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    # numcodecs' lz4 is a 4-byte size, then such a block; liblz4 decodes exactly that many bytes
    return lz4_into(out.nbytes.to_bytes(4, "little") + bytes(data), out)


def blosc_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    Blosc().decode(data, out=out)  # c-blosc, as zarr-python calls it: the header's sizes checked
    return None


Decode = Callable[[bytes | memoryview, np.ndarray], str | None]
_ZLIB_NG_ERROR = cast(type[Exception], zlib_ng.error)  # its stubs declare an instance
# what the libraries raise on damaged streams (LZMAError is an Exception; OSError covers gzip's)
ERRORS: tuple[type[Exception], ...] = (
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    zlib.error,
    _ZLIB_NG_ERROR,
    lzma.LZMAError,
)


def bounded(name: str, decode: Decode, data: bytes | memoryview, out: np.ndarray) -> str | None:
    """``decode(data, out)``, the libraries' errors on damaged data as the reason."""
    try:
        return decode(data, out)
    except ERRORS as e:
        return f"{name} decode failed: {type(e).__name__}: {e}"
