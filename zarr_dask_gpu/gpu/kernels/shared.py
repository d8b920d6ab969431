"""The constants that the CUDA sources and their Python launchers share, written once, here.

``kernels.module`` compiles a source with its table's ``#define`` lines before its text, the host C
tests pass the same as ``-D`` flags (``flags``), and the launchers read their values from the tables.
The sources define none of them and stop at an ``#error`` without them; ``ZS_RECORD`` is also held
by the compiler to the size of the struct it measures. Imports nothing: the host tests read it on
machines without a GPU."""

from collections.abc import Mapping

ZSTD: dict[str, int] = {
    # a chunk's status (zstd_blocks.REASONS names them)
    "ZS_OK": 0,
    "ZS_TRUNC": 1,
    "ZS_HEADER": 2,
    "ZS_CORRUPT": 3,
    "ZS_SIZE": 4,
    "ZS_UNSUPPORTED": 5,  # a frame the kernels do not take: the host decodes it
    "ZS_OFFSET": 6,
    "ZS_DICT": 7,
    "ZS_CHECKSUM": 8,
    "ZS_TRAILING": 9,
    # a chunk's copier: a thread block a frame, waves across a frame's blocks, a warp a frame
    "ZS_BY_FRAME": 0,
    "ZS_BY_WAVES": 1,
    "ZS_BY_WARP": 2,
    # threads of a kernel's thread block, which its shared arrays are sized by: a launch with more
    # would write past them
    "ZS_STEP": 256,  # the copiers', a sequence each of a step: a multiple of 32, at most 1024
    "ZS_WARPS": 4,  # zs_copy_warps', a frame a warp
    "ZS_XXH_THREADS": 128,  # zs_checksum's, four a frame
    "ZS_SEQ_THREADS": 8,  # zs_sequences', a zstd block each with its tables in a room
    "ZS_LIT_THREADS": 32,  # zs_literals'
    "ZS_WAVES_MAX": 256,  # waves of the copier by waves; then the matches left are copied in order
    # the scratch the launcher lays out
    "ZS_RECORD": 176,  # bytes of a zstd block's record (zblock)
    "ZS_HUF_MAX_BITS": 11,  # a Huffman table: 2 bytes an entry, 2^11 entries
    "ZS_FSE_ENTRIES": 512,  # an FSE table (accuracy log 9 at most): 2 bytes an entry; three a block
}

INFLATE: dict[str, int] = {
    # a stream's status (inflate.Decode.reasons names them)
    "IF_OK": 0,
    "IF_BAD": 1,  # not Deflate as zlib reads it
    "IF_TRUNCATED": 2,  # the stream ends inside a block, a header or a trailer
    "IF_OVERFLOW": 3,  # it decodes to more than the chunk's bytes
    "IF_SHORT": 4,  # it decodes to fewer
    "IF_CHECK": 5,  # Adler-32, CRC-32 or ISIZE does not match
    # the wrapper around the Deflate stream
    "IF_RAW": 0,
    "IF_ZLIB": 1,
    "IF_GZIP": 2,
    "IF_WARPS": 4,  # streams a thread block, a warp each
}

TABLES: dict[str, dict[str, int]] = {"zstd.cu": ZSTD, "inflate.cu": INFLATE}


def values(source: str, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
    """The constants ``source`` (a file name of ``gpu/kernels/``) is compiled with: its table's (none
    for a source without one), with ``overrides`` in their place or beside them."""
    return {**TABLES.get(source, {}), **(overrides or {})}


def defines(source: str, overrides: Mapping[str, int] | None = None) -> str:
    """``values`` as ``#define`` lines, to stand before the source's text."""
    return "".join(f"#define {k} {v}\n" for k, v in values(source, overrides).items())


def flags(source: str, overrides: Mapping[str, int] | None = None) -> list[str]:
    """``values`` as the host compiler's ``-D`` flags."""
    return [f"-D{k}={v}" for k, v in values(source, overrides).items()]
