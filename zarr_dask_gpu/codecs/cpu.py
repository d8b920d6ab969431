"""CPU decoding of whole stored chunks with zarr-python's own codec chain."""

import threading
from collections.abc import Iterable
from typing import Any, cast

import numpy as np
from zarr.codecs import ShardingCodec
from zarr.core.array import create_codec_pipeline
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer
from zarr.core.chunk_utils import ChunkTransform
from zarr.core.codec_pipeline import AsyncChunkTransform
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata
from zarr.core.sync import sync
from zarr.registry import get_pipeline_class

from ..errors import ChunkDecodeError
from ..metadata import ArrayInfo
from . import compressions

_lock = threading.Lock()
_transforms: dict[str, tuple[ChunkTransform | AsyncChunkTransform, ArraySpec]] = {}


def _transform(info: ArrayInfo) -> tuple[ChunkTransform | AsyncChunkTransform, ArraySpec]:
    """zarr-python's chunk transform and chunk spec for ``info``, built once per process."""
    token = info.token
    with _lock:
        if token not in _transforms:
            meta = info.metadata
            order = meta.order if isinstance(meta, ArrayV2Metadata) else "C"
            spec = ArraySpec(
                shape=info.chunks,
                dtype=meta.dtype if isinstance(meta, ArrayV2Metadata) else meta.data_type,
                fill_value=meta.fill_value,
                config=ArrayConfig.from_dict({"order": order}),
                prototype=default_buffer_prototype(),
            )
            codecs: tuple[Any, ...]
            if info.shard is None:
                codecs = tuple(
                    cast(Iterable[Any], create_codec_pipeline(meta))
                )  # a pipeline iterates its codecs
            else:  # read units are inner chunks: their own chain, evolved for their shape
                assert isinstance(meta, ArrayV3Metadata)
                inner = cast(ShardingCodec, meta.codecs[0]).codecs
                pipeline = get_pipeline_class().from_codecs(inner).evolve_from_array_spec(spec)
                codecs = tuple(cast(Iterable[Any], pipeline))
            try:
                transform: ChunkTransform | AsyncChunkTransform = ChunkTransform(codecs=codecs)
            except TypeError:  # a codec without a synchronous path
                transform = AsyncChunkTransform(codecs=codecs)
            _transforms[token] = (transform, spec)
        return _transforms[token]


def decode_chunk(info: ArrayInfo, coords: tuple[int, ...], data: memoryview) -> np.ndarray:
    """Decode one stored chunk into a native-byte-order array of the chunk's shape.

    Raises
    ------
    ChunkDecodeError
        The chunk is damaged or decodes to the wrong size; the message names its key.
    """
    key, label = info.chunk_key(coords), info.chunk_label(coords)
    chain = info.chain.gpu
    expected = int(np.prod(info.chunks)) * (
        chain.stored_itemsize(info.dtype) if chain else info.dtype.itemsize
    )
    if chain is not None:
        why = compressions.check(chain.compression, data[:-4] if chain.crc32c else data, expected)
        if why:
            raise ChunkDecodeError(info.location, key, label + why)
    elif len(data) == 0:
        raise ChunkDecodeError(info.location, key, label + "the stored chunk is empty (0 bytes)")
    transform, spec = _transform(info)
    try:
        buf = Buffer.from_bytes(data)
        if isinstance(transform, ChunkTransform):
            out = transform.decode_chunk(buf, spec)
        else:
            out = sync(transform.decode_chunk(buf, spec))
        arr = out.as_numpy_array()
    except Exception as e:  # numcodecs and zarr raise many types for damaged data
        raise ChunkDecodeError(info.location, key, f"{label}decode failed: {type(e).__name__}: {e}") from e
    if arr.shape != info.chunks:
        raise ChunkDecodeError(
            info.location, key, f"{label}decoded to shape {arr.shape}, expected {info.chunks}"
        )
    return arr.astype(info.dtype, copy=False)
