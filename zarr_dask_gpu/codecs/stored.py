"""The outermost stage of a stored chunk, whichever decoder undoes the rest of its chain.

zarr-python's codecs trust what they are handed: zstd, lz4 and blosc allocate what their headers
claim (c-blosc also reads as many bytes as its header says the frame has), and gzip, zlib, bz2 and
lzma inflate whatever the stream holds. So before the host hands a chunk to them, ``open_stored``
checks the headers of the chain's outermost compressor against the size it decodes to, and decodes
the streams that state no size itself, to that size, with the reference libraries
(``reference.*_at_most``). The size comes from the stages before the compressor (``outer_stage``);
where one of them does not say (a numcodecs filter outside ``filters.SUPPORTED``, a second
compressor), the header's claim is held to a bound instead. Pure Python: imports without a GPU.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import google_crc32c
import numcodecs
import numpy as np
from zarr.core.metadata import ArrayV2Metadata

from ..metadata import ArrayInfo
from . import headers, reference
from .chain import V3_FILTERS, codec_doc, v2_codecs
from .filters import SUPPORTED, encoded_itemsize

# (stored bytes, the size they decode to, whether that size is exact or only a bound) -> why not
Check = Callable[[bytes | memoryview, int, bool], str | None]


def _sized(check: Callable[[bytes | memoryview, int], str | None]) -> Check:
    return lambda data, size, exact: check(data, size) if exact else None


def _header(check: Callable[[bytes | memoryview, int], str | None]) -> Check:
    return lambda data, size, exact: check(data, size)


@dataclass(frozen=True)
class Guard:
    """How the host guards one compressor's stored bytes (``GUARDS``).

    Attributes
    ----------
    check
        Why the stored bytes cannot decode to the size (exact, or a bound), or None.
    at_most
        For streams that state no size: the bounded decode that replaces zarr-python's; None where
        zarr-python decodes after the check.
    """

    check: Check | None
    at_most: reference.AtMost | None = None


# keyed by numcodecs id (v2 compressor ids; v3 names without their "numcodecs." prefix)
GUARDS: Mapping[str, Guard] = {
    "zstd": Guard(headers.check_zstd),
    "lz4": Guard(headers.check_lz4),
    "blosc": Guard(headers.check_blosc_frame),  # any inner compressor: the frame's sizes are blosc's
    "gzip": Guard(_header(headers.check_gzip), reference.gzip_at_most),
    "zlib": Guard(_header(headers.check_zlib), reference.zlib_at_most),
    "bz2": Guard(None, reference.bz2_at_most),
    "lzma": Guard(None, reference.lzma_at_most),
}
_RAW = Guard(_sized(headers.check_raw))  # no compressor: the stored bytes are the chunk's

# where a stage before the compressor does not say its size: numcodecs' checksum filters add 4 bytes,
# packbits and categorize shrink, and a compressor inside grows incompressible bytes by under 1%
_BOUND_FACTOR, _BOUND_SLACK = 2, 1 << 16


@dataclass(frozen=True)
class Outer:
    """A chain's outermost stored stage.

    Attributes
    ----------
    codec
        The compressor's numcodecs id, or None for chunks stored uncompressed.
    config
        The compressor's configuration.
    size
        The bytes it decodes to, or a bound on them where ``exact`` is False.
    exact
        ``size`` is the size the stages before it say.
    crc32c
        A v3 crc32c follows it: the stored chunk's last 4 bytes.
    index
        For a v3 chain, the compressor's position in it: ``codecs[:index]`` decode what it decodes to.
    """

    codec: str | None
    config: Mapping[str, Any]
    size: int
    exact: bool
    crc32c: bool = False
    index: int | None = None

    @property
    def guard(self) -> Guard:
        return GUARDS[self.codec] if self.codec else _RAW


def outer_stage(info: ArrayInfo) -> Outer | None:
    """The outermost stored stage of ``info``'s read units, or None where the host cannot say what
    it is (a compressor of another kind, or stages after the last compressor)."""
    meta = info.metadata
    elems = int(np.prod(info.chunks, dtype=np.int64))
    if isinstance(meta, ArrayV2Metadata):
        configs, comp = v2_codecs(meta)
        sized = all(c["id"] in SUPPORTED for c in configs)
        size = elems * encoded_itemsize(configs, info.dtype) if sized else None
        if comp is None:
            return None if size is None else Outer(None, {}, size, True)
        return _outer(comp["id"], comp, size, elems * info.dtype.itemsize, False, None)
    docs = [codec_doc(c) for c in meta.codecs]
    if info.shard is not None:  # the read unit is an inner chunk: the inner chain
        docs = [codec_doc(c) for c in docs[0]["configuration"]["codecs"]]
    crc = bool(docs) and docs[-1]["name"] == "crc32c"
    body = docs[:-1] if crc else docs
    sizes = _v3_sizes(body, elems, info.dtype)
    last = len(body) - 1
    name = str(body[last]["name"]).removeprefix("numcodecs.") if body else ""
    if name in GUARDS:
        conf = dict(body[last].get("configuration") or {})
        return _outer(name, conf, sizes[last], elems * info.dtype.itemsize, crc, last)
    return None if sizes[-1] is None else Outer(None, {}, sizes[-1], True, crc)


def _outer(
    name: str, conf: Mapping[str, Any], size: int | None, logical: int, crc: bool, index: int | None
) -> Outer | None:
    if name not in GUARDS:
        return None
    if size is None:
        return Outer(name, conf, _BOUND_FACTOR * logical + _BOUND_SLACK, False, crc, index)
    return Outer(name, conf, size, True, crc, index)


def _v3_sizes(docs: list[dict[str, Any]], elems: int, dtype: np.dtype) -> list[int | None]:
    """The bytes each stage's input holds, after ``docs[i]`` decodes stage ``i``'s output: the last
    entry is what the outermost stage decodes to (None once a stage does not say)."""
    sizes: list[int | None] = []
    configs: list[dict[str, Any]] = []  # numcodecs filters before the serialiser
    size: int | None = elems * dtype.itemsize
    for doc in docs:
        sizes.append(size)
        name = str(doc["name"]).removeprefix("numcodecs.")
        if size is None or name in ("transpose", "bytes", "shuffle"):
            continue
        if name in V3_FILTERS:
            conf = doc.get("configuration") or {}
            configs.append(numcodecs.get_codec({"id": name, **conf}).get_config())
            size = elems * encoded_itemsize(configs, dtype)
        elif name == "crc32c":
            size += 4
        else:  # compressors, serialisers of other kinds, codecs this table does not know
            size = None
    sizes.append(size)
    return sizes


def crc32c_matches(chunk: bytes | memoryview) -> bool:
    """Whether a stored chunk's last 4 bytes are the crc32c of the rest (the v3 codec's layout)."""
    return google_crc32c.value(bytes(chunk[:-4])) == int.from_bytes(chunk[-4:], "little")


def open_stored(outer: Outer, data: memoryview) -> bytes | memoryview:
    """Check a stored chunk's outermost stage and, for a stream that states no size, decode it.

    Returns
    -------
    data
        What the rest of the chain decodes: the stored bytes as they are where zarr-python decodes
        the compressor after the check (``Guard.at_most`` None), else the compressor's output, its
        crc32c verified, for the stages before the compressor.

    Raises
    ------
    ValueError
        Why the chunk cannot be one of this chain; the libraries' own errors on damaged streams.
    """
    if len(data) == 0:
        raise ValueError("the stored chunk is empty (0 bytes)")
    payload = data
    if outer.crc32c:
        if len(data) < 4:
            raise ValueError("the stored chunk is shorter than its crc32c")
        payload = data[:-4]
    guard = outer.guard
    why = guard.check(payload, outer.size, outer.exact) if guard.check else None
    if why:
        raise ValueError(why)
    if guard.at_most is None:
        return data
    if outer.crc32c and not crc32c_matches(data):
        raise ValueError("crc32c checksum does not match")
    raw = guard.at_most(payload, outer.size, outer.config)
    why = reference.wrong_size(str(outer.codec), len(raw), outer.size) if outer.exact else None
    if why:
        raise ValueError(why)
    return raw
