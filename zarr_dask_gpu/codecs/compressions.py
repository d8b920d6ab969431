"""The compressions this package decodes, one row each: every stage of the read path reads its row.

A row says how metadata names the compression (v2 compressor ids, v3 codec names, blosc's inner
compressor names), how the host checks a stored chunk's headers (``headers``), which bytes around
the payload the device decoder skips, who decodes it on the GPU path and with what (this package's
kernels, nvCOMP after a device walk, or the reference library on the host), how the reference
library decodes it (``reference``: the verdict on what the device decoders refuse), and what
``zarr-dask-gpu info`` says of it. Adding a GPU codec is a row plus its kernel. Pure Python:
imports on machines without a GPU.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from . import headers, reference

Check = Callable[[bytes | memoryview, int], str | None]


class Decoder(StrEnum):
    """Who decodes a compression's chunks on the GPU path."""

    KERNELS = "kernels"  # this package's kernels, bounded on any bytes
    NVCOMP = "nvcomp"  # nvCOMP, given only what a device walk has proven sound
    HOST = "host"  # the reference library on the host's cores, then one copy to the device
    BLOSC = "blosc"  # this package's frame kernels; the inner streams by their own row
    NONE = "none"  # raw chunks, used where they lie


@dataclass(frozen=True)
class Blosc:
    """What a blosc row's frames hold: the inner compressor names (``cname``) it decodes, its inner
    streams' row, and c-blosc's format code of them (the top three bits of a frame's flags)."""

    cnames: tuple[str, ...]
    streams: str
    compcode: int


@dataclass(frozen=True)
class Compression:
    """One compression, as metadata, the host check, the device decoders and ``info`` see it.

    Attributes
    ----------
    name
        This package's name, the key of ``COMPRESSIONS`` (``GpuChain.compression``).
    v2_ids, v3_names
        The v2 compressor ids and v3 codec names that select it (blosc rows: none, see ``blosc``).
    blosc
        For a blosc row, its frames' inner compressor (``Blosc``); None for other rows.
    check
        The host's structure check of a stored chunk against its decoded size: why it cannot be a
        chunk of that size, or None.
    skip
        Bytes before the payload that nvCOMP decodes (numcodecs lz4's 4-byte size).
    decoder
        Who decodes it on the GPU path (``Decoder``); nvCOMP after the device walk
        ``device_check`` proves each item sound.
    device_check
        The kind number of ``gpu/decoders/validate.py``'s walk for this stream, or None where there is none.
    nvcomp
        nvCOMP's name of the algorithm (its C API's ``nvcompBatched<Name>...``), or None.
    host_from
        Chunks that decode to this many bytes or more decode on the host instead (as
        ``Decoder.HOST`` rows do): a stream that nvCOMP decodes with one thread block is slower
        there than on a CPU core, and a block of such chunks has too few of them to fill the device.
        None: never.
    decode
        The reference library's bounded decode into an output of the decoded size: why it failed,
        or None when the output holds the chunk.
    info
        Where and how ``zarr-dask-gpu info`` says the GPU path undoes it.
    """

    name: str
    check: Check
    decoder: Decoder
    decode: reference.Decode | None
    info: str
    v2_ids: tuple[str, ...] = ()
    v3_names: tuple[str, ...] = ()
    blosc: Blosc | None = None
    skip: int = 0
    device_check: int | None = None
    nvcomp: str | None = None
    host_from: int | None = None


# read into pinned host memory, decoded on the pool of cpu-threads, copied to the device once
_HOST_COPY = (
    "CPU (zlib-ng, on cpu-threads), then copied to the device once; with deflate-decoder: kernels, "
    "GPU (inflate kernel, a warp a stream)"
)

_ROWS = (
    Compression("none", headers.check_raw, Decoder.NONE, None, "GPU (used as stored)"),
    Compression(
        "zstd",
        headers.check_zstd,
        Decoder.KERNELS,
        reference.zstd_into,
        "GPU (zstd kernels)",
        v2_ids=("zstd",),
        v3_names=("zstd", "numcodecs.zstd"),
        device_check=1,
        nvcomp="Zstd",
    ),
    Compression(
        "gzip",
        headers.check_gzip,
        Decoder.HOST,
        reference.gzip_into,
        _HOST_COPY,
        v2_ids=("gzip",),
        v3_names=("gzip", "numcodecs.gzip"),
        nvcomp="Gzip",
    ),
    Compression(
        "zlib",
        headers.check_zlib,
        Decoder.HOST,
        reference.zlib_into,
        _HOST_COPY,
        v2_ids=("zlib",),
        v3_names=("numcodecs.zlib",),
        nvcomp="Deflate",
    ),
    Compression(
        "lz4",
        headers.check_lz4,
        Decoder.NVCOMP,
        reference.lz4_into,
        "GPU (lz4 walk kernel, nvCOMP lz4); chunks of 4 MiB or more: CPU (liblz4, on cpu-threads), "
        "then copied to the device once",
        v2_ids=("lz4",),
        v3_names=("numcodecs.lz4",),
        skip=4,
        device_check=4,
        nvcomp="LZ4",
        host_from=4 << 20,  # a whole chunk is one lz4 block: docs/decisions/serial-streams.md
    ),
    # blosc's inner lz4 streams: bare blocks, without numcodecs' size
    Compression(
        "lz4-block",
        headers.check_lz4_block,
        Decoder.NVCOMP,
        reference.lz4_block_into,
        "GPU (lz4 walk kernel, nvCOMP lz4)",
        device_check=5,
        nvcomp="LZ4",
    ),
    # blosc frames of each inner compressor nvCOMP or this package decodes (lz4hc writes lz4 blocks;
    # blosclz and snappy are decoded on the CPU)
    *(
        Compression(
            f"blosc-{name}", headers.check_blosc_frame, Decoder.BLOSC, reference.blosc_into, "", blosc=b
        )
        for name, b in {
            "lz4": Blosc(("lz4", "lz4hc"), "lz4-block", 1),
            "zstd": Blosc(("zstd",), "zstd", 4),
            "zlib": Blosc(("zlib",), "zlib", 3),
        }.items()
    ),
)

COMPRESSIONS: Mapping[str, Compression] = {row.name: row for row in _ROWS}


def get(name: str) -> Compression:
    """The row of ``name``; ValueError for a name no row has."""
    try:
        return COMPRESSIONS[name]
    except KeyError:
        raise ValueError(f"no compression {name!r}") from None


def from_v2(compressor: str | None, cname: str | None = None) -> Compression | None:
    """The row of a v2 compressor id (``cname``: blosc's inner compressor), None if no row has it."""
    if compressor is None:
        return COMPRESSIONS["none"]
    if compressor == "blosc":
        return _blosc(cname)
    return next((r for r in _ROWS if compressor in r.v2_ids), None)


def from_v3(codec: str, cname: str | None = None) -> Compression | None:
    """The row of a v3 bytes-to-bytes codec name (``cname``: blosc's), None if no row has it."""
    if codec == "blosc":
        return _blosc(cname)
    return next((r for r in _ROWS if codec in r.v3_names), None)


def _blosc(cname: str | None) -> Compression | None:
    return next((r for r in _ROWS if r.blosc and cname in r.blosc.cnames), None)


def inner(row: Compression) -> Compression:
    """A blosc row's inner streams' row."""
    assert row.blosc is not None, row.name
    return COMPRESSIONS[row.blosc.streams]


def on_host(row: Compression, decoded: int) -> bool:
    """Whether the GPU path decodes chunks of ``row`` that decode to ``decoded`` bytes on the host."""
    return row.decoder == Decoder.HOST or (row.host_from is not None and decoded >= row.host_from)


def info(row: Compression) -> str:
    """What ``zarr-dask-gpu info`` says of the stage ``row`` decodes."""
    if row.blosc is None:
        return row.info
    name = row.name.removeprefix("blosc-")
    return f"GPU (header kernel; its {name} streams: {inner(row).info}; unshuffle kernel)"


def check(name: str, data: bytes | memoryview, expected: int) -> str | None:
    """Why ``data`` cannot be a stored chunk of compression ``name`` that decodes to ``expected``
    bytes, or None if it may be one."""
    if len(data) == 0:
        return "the stored chunk is empty (0 bytes)"
    return get(name).check(data, expected)


def decode_into(name: str, data: bytes | memoryview, out: np.ndarray) -> str | None:
    """The reference library's decode of ``data`` (a stored chunk of ``name``, or a blosc inner
    stream of its row) into ``out`` (uint8, the decoded size), after the host check.

    Returns
    -------
    why
        Why the chunk cannot be decoded to exactly ``out.nbytes`` bytes, or None when ``out`` holds it.
    """
    row = get(name)
    why = check(name, data, out.nbytes)
    if why:
        return why
    assert row.decode is not None, name  # raw chunks are not decoded
    return reference.bounded(row.name, row.decode, data, out)
