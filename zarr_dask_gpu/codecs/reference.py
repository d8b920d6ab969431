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
"""

import gzip
import io
import zlib

import numpy as np
from numcodecs import LZ4, Blosc, Zstd

from .chain import Compression
from .headers import check


def decode_into(compression: Compression | str, data: bytes | memoryview, out: np.ndarray) -> str | None:
    """Decode ``data`` into ``out`` (uint8, the decoded size): a stored chunk of ``compression``, a
    whole blosc frame (``"blosc"``) or one of blosc's bare lz4 streams (``"lz4-block"``).

    Returns
    -------
    why
        Why the chunk cannot be decoded to exactly ``out.nbytes`` bytes, or None when ``out`` holds it.
    """
    n = out.nbytes
    if compression == "lz4-block":  # numcodecs' lz4 is a 4-byte size, then such a block
        compression, data = "lz4", n.to_bytes(4, "little") + bytes(data)
    why = check("blosc-lz4" if compression == "blosc" else compression, data, n)  # type: ignore[arg-type]
    if why:
        return why
    try:
        if compression == "gzip":
            with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as f:
                got = f.readinto(memoryview(out))
                if got != n or f.read(1):  # read(1) also ends the last member: its CRC-32 and size
                    return f"gzip stream does not decode to {n} bytes"
        elif compression == "zlib":
            d = zlib.decompressobj()
            raw = d.decompress(data, n)
            if len(raw) == n and not d.eof and d.decompress(d.unconsumed_tail, 1):
                return f"zlib stream decodes to more than {n} bytes"
            if not d.eof:
                return "zlib stream is truncated"
            if len(raw) != n:
                return f"zlib stream decodes to {len(raw)} bytes, metadata says {n}"
            out[:] = np.frombuffer(raw, np.uint8)
        elif compression == "zstd":
            # as zarr-python calls it: with ``out``, numcodecs reads small or large windows that its
            # own decode refuses. The header check bounded every stated size by n; frames without one
            # are streamed as zarr-python streams them
            raw = Zstd().decode(data)
            if len(raw) != n:
                return f"zstd chunk decodes to {len(raw)} bytes, metadata says {n}"
            out[:] = np.frombuffer(raw, np.uint8)
        elif compression == "lz4":  # the header check made its stated size n; liblz4 decodes exactly
            out[:] = np.frombuffer(LZ4().decode(data), np.uint8)
        elif compression == "blosc":  # c-blosc, as zarr-python calls it: the header's sizes checked
            Blosc().decode(data, out=out)
        else:
            raise ValueError(compression)
    except (OSError, EOFError, ValueError, RuntimeError, zlib.error) as e:
        return f"{compression} decode failed: {type(e).__name__}: {e}"
    return None
