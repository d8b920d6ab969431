"""Classify a zarr codec chain into what the GPU path decodes itself (pure, CPU-importable)."""

from dataclasses import dataclass
from typing import Literal

import numpy as np
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

Compression = Literal["none", "zstd", "gzip", "zlib", "lz4"]

# names as zarr v3 codec documents and numcodecs codec ids spell them
_V3_COMPRESSORS: dict[str, Compression] = {
    "zstd": "zstd",
    "gzip": "gzip",
    "numcodecs.zstd": "zstd",
    "numcodecs.gzip": "gzip",
    "numcodecs.zlib": "zlib",
    "numcodecs.lz4": "lz4",
}
_V2_COMPRESSORS: dict[str, Compression] = {"zstd": "zstd", "gzip": "gzip", "zlib": "zlib", "lz4": "lz4"}


@dataclass(frozen=True)
class GpuChain:
    """A codec chain the GPU path decodes end to end.

    Attributes
    ----------
    compression
        The one bytes-to-bytes stage, decoded by nvCOMP (``"none"`` for raw chunks).
    big_endian
        The stored elements are big-endian and are swapped on the device.
    transpose
        The v3 transpose codec's order: the stored chunk is ``chunk.transpose(order)``.
    f_order
        The v2 ``order: "F"``: the stored chunk is in Fortran order.
    """

    compression: Compression
    big_endian: bool = False
    transpose: tuple[int, ...] | None = None
    f_order: bool = False


@dataclass(frozen=True)
class ChainPlan:
    """The codec chain as the readers see it: a GPU chain, or the reason it decodes on the CPU."""

    stages: tuple[str, ...]
    gpu: GpuChain | None
    cpu_reason: str | None


def classify(metadata: ArrayV2Metadata | ArrayV3Metadata) -> ChainPlan:
    """Describe ``metadata``'s codec chain and whether the GPU path decodes all of it."""
    if isinstance(metadata, ArrayV3Metadata):
        return _classify_v3(metadata)
    return _classify_v2(metadata)


def _classify_v3(metadata: ArrayV3Metadata) -> ChainPlan:
    docs = [c.to_dict() for c in metadata.codecs]
    stages = tuple(str(d["name"]) for d in docs)
    transpose: tuple[int, ...] | None = None
    big_endian = False
    compression: Compression = "none"
    reason = None
    seen_bytes = False
    for doc in docs:
        name, conf = doc["name"], doc.get("configuration") or {}
        if name == "transpose" and not seen_bytes and transpose is None:
            transpose = tuple(int(i) for i in conf["order"])
        elif name == "bytes" and not seen_bytes:
            seen_bytes = True
            big_endian = conf.get("endian") == "big"
        elif seen_bytes and name in _V3_COMPRESSORS and compression == "none":
            compression = _V3_COMPRESSORS[name]
        else:
            reason = f"codec {name!r} is not decoded on the GPU"
            break
    if reason is None and not seen_bytes:
        reason = f"array-to-bytes codec {stages} is not decoded on the GPU"
    if reason is None and transpose == tuple(range(len(metadata.shape))):
        transpose = None
    if reason is not None:
        return ChainPlan(stages, None, reason)
    return ChainPlan(stages, GpuChain(compression, big_endian, transpose), None)


def _classify_v2(metadata: ArrayV2Metadata) -> ChainPlan:
    filters = [f.get_config()["id"] for f in metadata.filters or ()]
    comp = metadata.compressor.get_config()["id"] if metadata.compressor is not None else None
    stages = (*filters, *([comp] if comp else []))
    big_endian = metadata.dtype.to_native_dtype().byteorder == ">"
    if filters:
        return ChainPlan(stages, None, f"v2 filters {filters} are not decoded on the GPU")
    if comp is not None and comp not in _V2_COMPRESSORS:
        return ChainPlan(stages, None, f"compressor {comp!r} is not decoded on the GPU")
    compression: Compression = _V2_COMPRESSORS[comp] if comp else "none"
    return ChainPlan(stages, GpuChain(compression, big_endian, None, metadata.order == "F"), None)


def swap_unit(dtype: np.dtype) -> int:
    """Bytes per byte-swapped unit: the item size, or half of it for complex numbers."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize
