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
Each function here decodes a chunk that passed its host check; ``compressions.decode_into`` runs both.
"""

import gzip
import io
import zlib
from collections.abc import Callable

import numpy as np
from numcodecs import LZ4, Blosc, Zstd


def gzip_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    n = out.nbytes
    with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as f:
        got = f.readinto(memoryview(out))
        if got != n or f.read(1):  # read(1) also ends the last member: its CRC-32 and size
            return f"gzip stream does not decode to {n} bytes"
    return None


def zlib_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    n = out.nbytes
    d = zlib.decompressobj()
    raw = d.decompress(data, n)
    if len(raw) == n and not d.eof and d.decompress(d.unconsumed_tail, 1):
        return f"zlib stream decodes to more than {n} bytes"
    if not d.eof:
        return "zlib stream is truncated"
    if len(raw) != n:
        return f"zlib stream decodes to {len(raw)} bytes, metadata says {n}"
    out[:] = np.frombuffer(raw, np.uint8)
    return None


def zstd_into(data: bytes | memoryview, out: np.ndarray) -> str | None:
    # as zarr-python calls it: with ``out``, numcodecs reads small or large windows that its own
    # decode refuses. The header check bounded every stated size by n; frames without one are
    # streamed as zarr-python streams them
    raw = Zstd().decode(data)
    if len(raw) != out.nbytes:
        return f"zstd chunk decodes to {len(raw)} bytes, metadata says {out.nbytes}"
    out[:] = np.frombuffer(raw, np.uint8)
    return None


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


def bounded(name: str, decode: Decode, data: bytes | memoryview, out: np.ndarray) -> str | None:
    """``decode(data, out)``, the libraries' errors on damaged data as the reason."""
    try:
        return decode(data, out)
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error) as e:
        return f"{name} decode failed: {type(e).__name__}: {e}"
