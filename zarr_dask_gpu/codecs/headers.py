"""Host-side structure checks of compressed chunks, before any decoder sees them (each
compression's row in ``compressions`` names its check).

Decoders must never be handed a frame whose stated size differs from the metadata's: zstd and lz4
decoders allocate from the header (docs/design.md). The GPU path's decoders check the same on the
device (``gpu/kernels/zstd.cu``'s frame walk, ``gpu/decoders/validate.py``'s lz4 walk).
"""

import struct

import numpy as np

ZSTD_MAGIC = 0xFD2FB528


def check_raw(data: bytes | memoryview, expected: int) -> str | None:
    """An uncompressed chunk: exactly the decoded size."""
    n = len(data)
    return None if n == expected else f"raw chunk has {n} bytes, metadata says {expected}"


def check_gzip(data: bytes | memoryview, expected: int) -> str | None:
    """A gzip chunk's first member header (a size trailer names its own member only: gzip chunks
    may hold several)."""
    if len(data) < 18 or data[0] != 0x1F or data[1] != 0x8B or data[2] != 8:
        return "not a gzip stream (bad header)"
    return None


def check_zlib(data: bytes | memoryview, expected: int) -> str | None:
    """A zlib stream's two header bytes: deflate, a valid check, no preset dictionary."""
    if len(data) < 6 or data[0] & 0x0F != 8 or (data[0] * 256 + data[1]) % 31 or data[1] & 0x20:
        return "not a zlib stream (bad header)"
    return None


def _want(expected: int, exact: bool) -> str:
    return f"expected {expected}" if exact else f"outside the chunk's bound of {expected}"


def check_lz4(data: bytes | memoryview, expected: int, exact: bool = True) -> str | None:
    """numcodecs' lz4: a 4-byte decoded size, then one block (``exact=False``: ``expected`` is only
    a bound on the size, where the chain before the compressor does not say it)."""
    if len(data) < 5:
        return "lz4 chunk shorter than its header"
    size = struct.unpack_from("<i", data, 0)[0]
    ok = size == expected if exact else 0 <= size <= expected
    return None if ok else f"lz4 header says {size} bytes, {_want(expected, exact)}"


def check_lz4_block(data: bytes | memoryview, expected: int) -> str | None:
    """A bare lz4 block (blosc's inner stream) states no size: only its decode can judge it."""
    return None


def check_blosc_frame(data: bytes | memoryview, expected: int, exact: bool = True) -> str | None:
    """A blosc1 frame: ``check_blosc`` of its header."""
    return check_blosc(bytes(data[:16]), len(data), expected, exact)


_NOT_ZSTD = "not a zstd frame (bad magic number)"


def check_zstd(data: bytes | memoryview, expected: int, exact: bool = True) -> str | None:
    """The frame and block headers of a zstd chunk, as libzstd walks them: its frames one after
    another (skippable frames passed over), each frame's stated content size within the chunk's
    room and, where every frame states one, their sum the chunk's size (``exact=False``: at most
    ``expected``); raw and RLE blocks within it too. The bytes inside compressed blocks are the
    decoder's to judge."""
    n, p, known, least, frames, all_known = len(data), 0, 0, 0, 0, True
    while p < n:
        if p + 4 > n:
            return "zstd chunk truncated inside a frame's magic number"
        magic = int.from_bytes(data[p : p + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable: its size, then as many bytes
            size = int.from_bytes(data[p + 4 : p + 8], "little")
            if p + 8 > n or size > n - p - 8:
                return "zstd skippable frame truncated"
            p += 8 + size
            continue
        if magic != ZSTD_MAGIC:
            return "bytes after the last zstd frame that are no frame" if frames else _NOT_ZSTD
        if p + 5 > n:
            return "zstd frame truncated inside its header"
        fhd = data[p + 4]
        if fhd & 0x08:
            return "zstd frame header has its reserved bit set"
        single, checked = (fhd >> 5) & 1, (fhd >> 2) & 1
        fcs_size = (single, 2, 4, 8)[fhd >> 6]
        dict_size = (0, 1, 2, 4)[fhd & 3]
        p += 5
        window = 0
        if not single:
            if p >= n:
                return "zstd frame truncated inside its header"
            log = (data[p] >> 3) + 10
            if log > 31:
                return "zstd frame's window is larger than libzstd allows"
            window = (1 << log) + (1 << log >> 3) * (data[p] & 7)
            p += 1
        if p + dict_size + fcs_size > n:
            return "zstd frame truncated inside its header"
        if dict_size and int.from_bytes(data[p : p + dict_size], "little"):
            return "zstd frame needs a dictionary (none is configured)"
        p += dict_size
        if fcs_size:
            fcs = int.from_bytes(data[p : p + fcs_size], "little") + (256 if fcs_size == 2 else 0)
            if fcs > expected - known:
                return f"zstd header says {known + fcs} bytes or more, {_want(expected, exact)}"
            known += fcs
        else:
            all_known = False
            if window > 1 << 27:  # libzstd streams such frames, with windows of at most 128 MiB
                return "zstd frame without a content size has a window over 128 MiB"
        p += fcs_size
        while True:
            if p + 3 > n:
                return "zstd frame truncated inside a block header"
            header = int.from_bytes(data[p : p + 3], "little")
            kind, size = (header >> 1) & 3, header >> 3
            if kind == 3:
                return "zstd block of the reserved type"
            p += 3 + (1 if kind == 1 else size)
            least += size if kind < 2 else 0
            if p > n:
                return "zstd frame truncated inside a block"
            if least > expected:
                return f"zstd blocks decode to more than {expected} bytes"
            if header & 1:
                break
        p += 4 * checked
        if p > n:
            return "zstd frame truncated inside its checksum"
        frames += 1
    if not frames:
        return _NOT_ZSTD
    if exact and all_known and known != expected:
        return f"zstd header says {known} bytes, expected {expected}"
    return None


def check_blosc(head: bytes, n: int, expected: int, exact: bool = True) -> str | None:
    """A blosc1 frame's 16-byte header against its stored and expected sizes (``exact=False``:
    ``expected`` bounds the decoded size)."""
    if n < 16:
        return "blosc frame shorter than its header"
    version, _, flags, typesize, nbytes, blocksize, ctbytes = struct.unpack_from("<BBBBiii", head)
    if version not in (1, 2):
        return f"not a blosc1 frame (format version {version})"
    ok = nbytes == expected if exact else 0 <= nbytes <= expected
    if not ok:
        return f"blosc header says {nbytes} bytes, {_want(expected, exact)}"
    if ctbytes > n or ctbytes < 16:  # bytes after the payload are not blosc's (c-blosc reads ctbytes)
        return f"blosc header says {ctbytes} stored bytes, the chunk has {n}"
    n = ctbytes
    if typesize < 1 or (nbytes and blocksize <= 0):
        return "corrupt blosc header"
    if flags & 0x02:
        return None if n == 16 + nbytes else "blosc copy-only frame of the wrong length"
    nblocks = -(-nbytes // blocksize) if nbytes else 0
    return None if 16 + 4 * nblocks <= n else "blosc frame truncated inside its block table"


def blosc_layout(heads: np.ndarray) -> dict[str, np.ndarray]:
    """Fields of checked blosc1 headers (one row of 16 bytes per frame), with each frame's number
    of blocks, whether its full blocks are split into ``typesize`` streams (``split``) and its number
    of inner streams (``rows``), by c-blosc 1.x's splitting rule."""
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
        "split": split,
        "ctbytes": words[:, 2].astype(np.int64),
    }
