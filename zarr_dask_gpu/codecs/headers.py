"""Host-side structure checks of compressed chunks, before any decoder sees them.

Decoders must never be handed a frame whose stated size differs from the metadata's: zstd and lz4
decoders allocate from the header, and nvCOMP 6.0 hangs or faults on some damaged frames
(docs/design.md). The GPU path runs the same checks in a kernel (``gpu/validate.py``).
"""

import struct

import numpy as np

from .chain import Compression

ZSTD_MAGIC = 0xFD2FB528


def skip_bytes(compression: Compression) -> tuple[int, int]:
    """Bytes before and after the payload that nvCOMP decodes (zlib header/trailer, lz4 size)."""
    return {"zlib": (2, 4), "lz4": (4, 0)}.get(compression, (0, 0))


def check(compression: Compression, data: bytes | memoryview, expected: int) -> str | None:
    """Why ``data`` cannot be a chunk that decodes to ``expected`` bytes, or None if it may be."""
    n = len(data)
    if n == 0:
        return "the stored chunk is empty (0 bytes)"
    if compression == "none":
        return None if n == expected else f"raw chunk has {n} bytes, metadata says {expected}"
    if compression == "zstd":
        return _check_zstd(bytes(data[:18]), n, expected)
    if compression == "gzip":
        if n < 18 or data[0] != 0x1F or data[1] != 0x8B or data[2] != 8:
            return "not a gzip stream (bad header)"
        isize = struct.unpack_from("<I", data, n - 4)[0]
        return None if isize == expected % 2**32 else f"gzip trailer says {isize} bytes, expected {expected}"
    if compression == "zlib":
        if n < 6 or data[0] & 0x0F != 8 or (data[0] * 256 + data[1]) % 31 or data[1] & 0x20:
            return "not a zlib stream (bad header)"
        return None
    if compression.startswith("blosc"):
        return check_blosc(bytes(data[:16]), n, expected)
    if compression == "lz4":
        if n < 5:
            return "lz4 chunk shorter than its header"
        size = struct.unpack_from("<i", data, 0)[0]
        return None if size == expected else f"lz4 header says {size} bytes, expected {expected}"
    raise ValueError(compression)


def _check_zstd(head: bytes, n: int, expected: int) -> str | None:
    if n < 6 or struct.unpack_from("<I", head)[0] != ZSTD_MAGIC:
        return "not a zstd frame (bad magic number)"
    fhd = head[4]
    if fhd & 0x08:
        return "zstd frame header has its reserved bit set"
    single = (fhd >> 5) & 1
    fcs_size = (0 if not single else 1, 2, 4, 8)[fhd >> 6]
    pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    if fcs_size == 0:
        return None  # no content size (tensorstore writes such frames): sizes come from metadata
    if pos + fcs_size > n:
        return "zstd frame truncated inside its header"
    fcs = int.from_bytes(head[pos : pos + fcs_size], "little") + (256 if fcs_size == 2 else 0)
    return None if fcs == expected else f"zstd header says {fcs} bytes, expected {expected}"


def check_blosc(head: bytes, n: int, expected: int) -> str | None:
    """A blosc1 frame's 16-byte header against its stored and expected sizes."""
    if n < 16:
        return "blosc frame shorter than its header"
    version, _, flags, typesize, nbytes, blocksize, ctbytes = struct.unpack_from("<BBBBiii", head)
    if version not in (1, 2):
        return f"not a blosc1 frame (format version {version})"
    if nbytes != expected:
        return f"blosc header says {nbytes} bytes, expected {expected}"
    if ctbytes != n:
        return f"blosc header says {ctbytes} stored bytes, the chunk has {n}"
    if typesize < 1 or (nbytes and blocksize <= 0):
        return "corrupt blosc header"
    if flags & 0x02:
        return None if n == 16 + nbytes else "blosc copy-only frame of the wrong length"
    nblocks = -(-nbytes // blocksize) if nbytes else 0
    return None if 16 + 4 * nblocks <= n else "blosc frame truncated inside its block table"


def blosc_layout(heads: np.ndarray) -> dict[str, np.ndarray]:
    """Fields of checked blosc1 headers (one row of 16 bytes per frame), with each frame's number
    of blocks and of inner streams (``rows``), by c-blosc 1.x's splitting rule."""
    words = heads[:, 4:16].copy().view("<i4")
    flags, ts = heads[:, 2].astype(np.int64), heads[:, 3].astype(np.int64)
    nbytes, bs = words[:, 0].astype(np.int64), np.maximum(words[:, 1].astype(np.int64), 1)
    nblocks = -(-nbytes // bs)
    left = nbytes % bs
    split = ((flags >> 4) & 1 == 0) & (ts <= 16) & (bs // np.maximum(ts, 1) >= 128)
    full = nblocks - (left > 0)
    rows = np.where(flags & 2, 1, full * np.where(split, ts, 1) + (left > 0))
    return {
        "flags": flags,
        "typesize": ts,
        "nbytes": nbytes,
        "blocksize": bs,
        "nblocks": nblocks,
        "rows": rows,
    }
