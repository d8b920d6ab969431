"""CPU decoding of whole stored chunks with zarr-python's own codec chain."""

import dataclasses
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
from zarr.core.metadata import ArrayV2Metadata
from zarr.core.sync import sync
from zarr.registry import get_pipeline_class

from ..errors import ChunkDecodeError
from ..metadata import ArrayInfo
from . import reference
from .stored import Outer, open_stored, outer_stage

_lock = threading.Lock()
_transforms: dict[str, tuple[Outer | None, ChunkTransform | AsyncChunkTransform, ArraySpec]] = {}


def _transform(info: ArrayInfo) -> tuple[Outer | None, ChunkTransform | AsyncChunkTransform, ArraySpec]:
    """The read unit's outermost stored stage, zarr-python's chunk transform of what the host leaves
    after ``open_stored`` (the whole chain, or the stages before a stream it decodes itself) and the
    chunk spec, built once per process."""
    token = info.chain_token
    with _lock:
        if token not in _transforms:
            meta = info.metadata
            outer = outer_stage(info)
            rest = outer is not None and outer.guard.at_most is not None
            order = meta.order if isinstance(meta, ArrayV2Metadata) else "C"
            spec = ArraySpec(
                shape=info.chunks,
                dtype=meta.dtype if isinstance(meta, ArrayV2Metadata) else meta.data_type,
                fill_value=meta.fill_value,
                config=ArrayConfig.from_dict({"order": order}),
                prototype=default_buffer_prototype(),
            )
            codecs: tuple[Any, ...]
            if isinstance(meta, ArrayV2Metadata):
                # a pipeline iterates its codecs
                whole = _without_compressor(meta) if rest else meta
                codecs = tuple(cast(Iterable[Any], create_codec_pipeline(whole)))
            elif info.shard is None:
                codecs = tuple(cast(Iterable[Any], create_codec_pipeline(meta)))
            else:  # read units are inner chunks: their own chain, evolved for their shape
                inner = cast(ShardingCodec, meta.codecs[0]).codecs
                pipeline = get_pipeline_class().from_codecs(inner).evolve_from_array_spec(spec)
                codecs = tuple(cast(Iterable[Any], pipeline))
            if rest and outer is not None and outer.index is not None:
                codecs = codecs[: outer.index]
            try:
                transform: ChunkTransform | AsyncChunkTransform = ChunkTransform(codecs=codecs)
            except TypeError:  # a codec without a synchronous path
                transform = AsyncChunkTransform(codecs=codecs)
            _transforms[token] = (outer, transform, spec)
        return _transforms[token]


def _without_compressor(meta: ArrayV2Metadata) -> ArrayV2Metadata:
    """``meta`` less its compressor (``chain.v2_codecs``: the last filter, where it stands for one)."""
    if meta.compressor is not None:
        return dataclasses.replace(meta, compressor=None)
    return dataclasses.replace(meta, filters=tuple(meta.filters or ())[:-1] or None)


def decode_chunk(info: ArrayInfo, coords: tuple[int, ...], data: memoryview) -> np.ndarray:
    """Decode one stored chunk into a native-byte-order array of the chunk's shape: its outermost
    stage checked (and, for streams that state no size, decoded with a bound) by ``open_stored``,
    the rest by zarr-python.

    Raises
    ------
    ChunkDecodeError
        The chunk is damaged or decodes to the wrong size; the message names its key.
    """
    key, label = info.chunk_key(coords), info.chunk_label(coords)
    outer, transform, spec = _transform(info)
    stored: bytes | memoryview = data
    try:
        if outer is not None:
            stored = open_stored(outer, data)
        elif len(data) == 0:
            raise ValueError("the stored chunk is empty (0 bytes)")
    except reference.ERRORS as e:
        raise ChunkDecodeError(info.location, key, label + _reason(e)) from e
    try:
        buf = Buffer.from_bytes(stored)
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


def _reason(e: Exception) -> str:
    # this package's own verdicts are ValueErrors with the reason; the libraries' are named
    return str(e) if type(e) is ValueError else f"decode failed: {type(e).__name__}: {e}"
