"""Classify a zarr codec chain into what the GPU path decodes itself (pure, CPU-importable)."""

from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from . import compressions
from .filters import encoded_itemsize, unsupported

# numcodecs filters that zarr v3 writes as array-to-array codecs ("numcodecs.delta", ...)
V3_FILTERS = ("delta", "fixedscaleoffset", "quantize", "bitround", "astype")
# numcodecs compressors, which a v2 array may also list as its last filter
V2_COMPRESSORS = ("zlib", "gzip", "bz2", "lzma", "zstd", "lz4", "blosc")


def v2_codecs(metadata: ArrayV2Metadata) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A v2 array's filters and compressor (their configurations). A compressor listed as the last
    filter with no compressor after it is the compressor: kerchunk and VirtualiZarr write HDF5's
    deflate so (``filters: [shuffle, zlib]``), and its stored bytes are the same as a compressor's."""
    configs = [f.get_config() for f in metadata.filters or ()]
    if metadata.compressor is not None:
        return configs, metadata.compressor.get_config()
    if configs and configs[-1]["id"] in V2_COMPRESSORS:
        return configs[:-1], configs[-1]
    return configs, None


@dataclass(frozen=True)
class GpuChain:
    """A codec chain the GPU path decodes end to end.

    Attributes
    ----------
    compression
        The one bytes-to-bytes stage: its row in ``compressions.COMPRESSIONS`` (``"none"`` for raw
        chunks).
    big_endian
        The stored elements are big-endian and are swapped on the device.
    transpose
        The v3 transpose codec's order: the stored chunk is ``chunk.transpose(order)``.
    f_order
        The v2 ``order: "F"``: the stored chunk is in Fortran order.
    filters
        v2 numcodecs filters (their configurations, as sorted item tuples), undone after decompression.
    crc32c
        The stored chunk ends with a crc32c of the rest (the v3 codec, last in the chain).
    """

    compression: str
    big_endian: bool = False
    transpose: tuple[int, ...] | None = None
    f_order: bool = False
    filters: tuple[tuple[tuple[str, Any], ...], ...] = ()
    crc32c: bool = False

    def filter_configs(self) -> list[dict[str, Any]]:
        return [dict(c) for c in self.filters]

    def decodes_in_place(self, dtype: np.dtype) -> bool:
        """The decompressed bytes are the chunk in C order as they stand, so a chunk can be decoded
        straight into the block."""
        swap = self.big_endian and dtype.itemsize > 1
        return self.compression != "none" and not (self.filters or swap or self.f_order or self.transpose)

    def stored_itemsize(self, dtype: np.dtype) -> int:
        """Bytes per element that the compressor saw (after the filters)."""
        return encoded_itemsize(self.filter_configs(), dtype) if self.filters else dtype.itemsize


@dataclass(frozen=True)
class ChainPlan:
    """The codec chain as the readers see it: a GPU chain, or the reason it decodes on the CPU."""

    stages: tuple[str, ...]
    gpu: GpuChain | None
    cpu_reason: str | None


@dataclass(frozen=True)
class ShardLayout:
    """A v3 ``sharding_indexed`` layout whose index this package reads itself.

    Attributes
    ----------
    shape
        The shard shape; the array's read unit is then the inner chunk.
    index_at_start
        The index sits before the inner chunks (``index_location: start``).
    checksum
        The index ends with a crc32c of its entries.
    """

    shape: tuple[int, ...]
    index_at_start: bool
    checksum: bool


def classify(metadata: ArrayV2Metadata | ArrayV3Metadata) -> ChainPlan:
    """Describe ``metadata``'s codec chain and whether the GPU path decodes all of it.

    For a sharded array with a plain index (bytes, optionally crc32c) this is the inner chunks'
    chain; other sharding layouts decode whole shards with zarr-python.
    """
    if isinstance(metadata, ArrayV3Metadata):
        layout = shard_layout(metadata)
        docs = [codec_doc(c) for c in metadata.codecs]
        if layout is not None:
            docs = [codec_doc(c) for c in docs[0]["configuration"]["codecs"]]
        return _classify_v3(docs, len(metadata.shape))
    return _classify_v2(metadata)


def shard_layout(metadata: ArrayV3Metadata) -> ShardLayout | None:
    """The sharding layout when the array is sharded with an index this package reads, else None."""
    docs = [codec_doc(c) for c in metadata.codecs]
    if len(docs) != 1 or docs[0]["name"] != "sharding_indexed":
        return None
    conf = docs[0]["configuration"]
    index = [codec_doc(c) for c in conf["index_codecs"]]
    names = [c["name"] for c in index]
    little = (index[0].get("configuration") or {}).get("endian", "little") == "little"
    if names not in (["bytes"], ["bytes", "crc32c"]) or not little:
        return None
    location = str(getattr(conf.get("index_location", "end"), "value", conf.get("index_location", "end")))
    shape = getattr(metadata.chunk_grid, "chunk_shape", None)  # the shard shape, on a regular grid
    if shape is None:
        return None
    return ShardLayout(tuple(int(n) for n in shape), location == "start", names[-1] == "crc32c")


def codec_doc(codec: Any) -> dict[str, Any]:
    """A codec's metadata document (codecs nested in a sharding codec's may be documents already)."""
    return codec if isinstance(codec, dict) else dict(codec.to_dict())


def _classify_v3(docs: list[dict], ndim: int) -> ChainPlan:
    stages = tuple(str(d["name"]) for d in docs)
    transpose: tuple[int, ...] | None = None
    big_endian = False
    compression = "none"
    reason = None
    seen_bytes = crc = False
    configs: list[dict[str, Any]] = []  # numcodecs array-to-array filters, in encoding order
    for doc in docs:
        if crc:  # crc32c must be the last stage
            reason = f"codec {doc['name']!r} after crc32c is not decoded on the GPU"
            break
        name, conf = doc["name"], doc.get("configuration") or {}
        if name == "transpose" and not seen_bytes and transpose is None and not configs:
            transpose = tuple(int(i) for i in conf["order"])
        elif not seen_bytes and transpose is None and name.removeprefix("numcodecs.") in V3_FILTERS:
            # numcodecs' own get_config fills the defaults (astype and the like)
            configs.append(numcodecs.get_codec({"id": name.removeprefix("numcodecs."), **conf}).get_config())
        elif name == "bytes" and not seen_bytes:
            seen_bytes = True
            big_endian = conf.get("endian") == "big"
        elif seen_bytes and name == "numcodecs.shuffle" and compression == "none" and not crc:
            # a bytes-to-bytes codec on the serialised chunk: the v2 Shuffle filter's transform
            configs.append(numcodecs.get_codec({"id": "shuffle", **conf}).get_config())
        elif seen_bytes and compression == "none" and (row := compressions.from_v3(name, conf.get("cname"))):
            compression = row.name
        elif seen_bytes and name == "crc32c":
            crc = True
        elif name == "blosc":
            reason = f"blosc's {conf.get('cname')!r} is not decoded on the GPU"
            break
        else:
            reason = f"codec {name!r} is not decoded on the GPU"
            break
    if reason is None and not seen_bytes:
        reason = f"array-to-bytes codec {stages} is not decoded on the GPU"
    if reason is None and configs:
        reason = unsupported(configs) or (
            "big-endian data with filters is not decoded on the GPU" if big_endian else None
        )
    if reason is None and transpose == tuple(range(ndim)):
        transpose = None
    if reason is not None:
        return ChainPlan(stages, None, reason)
    flt = tuple(tuple(sorted(c.items())) for c in configs)
    return ChainPlan(stages, GpuChain(compression, big_endian, transpose, filters=flt, crc32c=crc), None)


def _classify_v2(metadata: ArrayV2Metadata) -> ChainPlan:
    configs, compressor = v2_codecs(metadata)
    comp = compressor["id"] if compressor is not None else None
    stages = (*[c["id"] for c in configs], *([comp] if comp else []))
    big_endian = metadata.dtype.to_native_dtype().byteorder == ">"
    why = unsupported(configs) or (
        "big-endian data with filters is not decoded on the GPU" if configs and big_endian else None
    )
    if why:
        return ChainPlan(stages, None, why)
    flt = tuple(tuple(sorted(c.items())) for c in configs)
    cname = compressor.get("cname") if compressor is not None and comp == "blosc" else None
    row = compressions.from_v2(comp, cname)
    if row is None:
        what = f"blosc's {cname!r}" if comp == "blosc" else f"compressor {comp!r}"
        return ChainPlan(stages, None, f"{what} is not decoded on the GPU")
    return ChainPlan(stages, GpuChain(row.name, big_endian, None, metadata.order == "F", flt), None)


def swap_unit(dtype: np.dtype) -> int:
    """Bytes per byte-swapped unit: the item size, or half of it for complex numbers."""
    return dtype.itemsize // 2 if dtype.kind == "c" else dtype.itemsize


def stage_devices(plan: ChainPlan) -> list[tuple[str, str]]:
    """Each codec stage with where and how it is undone (for ``zarr-dask-gpu info``)."""
    if plan.gpu is None:
        return [(s, "CPU (zarr-python), then copied to the device") for s in plan.stages]
    how = {
        "bytes": "GPU (a view; byte swap if big-endian)",
        "transpose": "GPU (a view)",
        "crc32c": "GPU (checksum kernel)",
        "shuffle": "GPU (byte transposition)",
    }
    compression = compressions.get(plan.gpu.compression)
    out = []
    for stage in plan.stages:
        name = stage.removeprefix("numcodecs.")
        if name in compression.v3_names or name in compression.v2_ids or name == "blosc":
            out.append((stage, compressions.info(compression)))
        else:
            out.append((stage, how.get(name, "GPU (array operations)")))
    return out
