"""Sample zarr stores for the demo and the benchmark: 2-d float32 rows of a realistic compression ratio
(~3), and 3-d volumes of 1024 x 1024 slices whose noise sets the ratio."""

import os
from typing import Any, Literal

import numpy as np
import zarr

_COLS = 1 << 20  # one row is 4 MiB of float32


def write_sample(
    path: str | os.PathLike,
    nbytes: int,
    chunk_bytes: int = 8 << 20,
    *,
    shard_bytes: int | None = None,
    zarr_format: Literal[2, 3] = 3,
    compressors: Any = "auto",
) -> zarr.Array:
    """Write (or reuse, if it already matches) a 2-d float32 array of about ``nbytes``.

    Rows are a smooth wave plus noise rounded to 0.1, which zstd compresses about threefold, like
    gridded geophysical fields. Chunks of ``chunk_bytes`` are whole rows, or parts of one row when
    smaller than a row; ``shard_bytes`` groups whole rows of chunks into shards (zarr v3). The codecs
    are zarr's defaults (v3: bytes and zstd) unless ``compressors`` says otherwise.
    """
    row = _COLS * 4
    chunks = (max(chunk_bytes // row, 1), _COLS) if chunk_bytes >= row else (1, chunk_bytes // 4)
    shards = (max(shard_bytes // row, chunks[0]), _COLS) if shard_bytes else None
    unit = shards[0] if shards else chunks[0]
    rows = max(nbytes // row // unit, 1) * unit
    a = _complete(path, zarr_format, (rows, _COLS), chunks, shards, np.dtype("f4"), _mark(compressors))
    if a is not None:
        return a
    a = zarr.create_array(
        path,
        shape=(rows, _COLS),
        chunks=chunks,
        shards=shards,
        dtype="f4",
        overwrite=True,
        zarr_format=zarr_format,
        compressors=compressors,
    )
    rng = np.random.default_rng(0)
    t = np.linspace(0, 40 * np.pi, _COLS, dtype=np.float32)
    slab = max(unit, 64 // unit * unit)
    for r in range(0, rows, slab):
        n = min(slab, rows - r)
        noise = rng.standard_normal((n, _COLS), dtype=np.float32)
        a[r : r + n] = np.round(np.sin(t + r)[None, :] * 10 + noise, 1)
    a.attrs[_MARK] = _mark(compressors)  # last: a store cut short is not reused
    return a


def write_volume(
    path: str | os.PathLike,
    nbytes: int,
    chunk_bytes: int,
    *,
    dtype: str = "f4",
    noise: float = 1.0,
    decimals: int | None = None,
    compressors: Any = "auto",
) -> zarr.Array:
    """Write (or reuse, if it already matches) a zarr v3 volume ``(n, 1024, 1024)`` of ``dtype`` of
    about ``nbytes`` (at least one chunk), in chunks of whole slices of ``chunk_bytes``.

    Slices are a smooth 3-d wave plus gaussian noise of standard deviation ``noise``, rounded to
    ``decimals`` (None: not rounded): the more noise and decimals, the lower the compression ratio.
    """
    item = np.dtype(dtype).itemsize
    depth = max(chunk_bytes // (_SIDE * _SIDE * item), 1)
    shape = (max(nbytes // (_SIDE * _SIDE * item) // depth, 1) * depth, _SIDE, _SIDE)
    mark = _mark(compressors) + f"; noise={noise}; decimals={decimals}"
    a = _complete(path, 3, shape, (depth, _SIDE, _SIDE), None, np.dtype(dtype), mark)
    if a is not None:
        return a
    a = zarr.create_array(
        path, shape=shape, chunks=(depth, _SIDE, _SIDE), dtype=dtype, overwrite=True, compressors=compressors
    )
    rng = np.random.default_rng(0)
    y = np.sin(np.linspace(0, 6 * np.pi, _SIDE, dtype=np.float32))[:, None]
    x = np.cos(np.linspace(0, 4 * np.pi, _SIDE, dtype=np.float32))[None, :]
    for z in range(0, shape[0], depth):
        k = np.arange(z, z + depth, dtype=np.float32)[:, None, None]
        wave = 10 * (y * x)[None] + np.sin(k / 16)
        values = wave + rng.standard_normal(wave.shape, dtype=np.float32) * noise
        a[z : z + depth] = (values if decimals is None else np.round(values, decimals)).astype(dtype)
    a.attrs[_MARK] = mark  # last: a store cut short is not reused
    return a


def _complete(
    path: str | os.PathLike,
    zarr_format: int,
    shape: tuple,
    chunks: tuple,
    shards: tuple | None,
    dtype: np.dtype,
    mark: str,
) -> zarr.Array | None:
    """The array at ``path`` if it is one of these, written to the end (its ``mark`` is set last and
    every chunk or shard is there), else None."""
    try:
        a = zarr.open_array(path, mode="r")
    except Exception:  # none, or not an array of ours: written anew
        return None
    have = (a.metadata.zarr_format, a.shape, a.chunks, a.shards, a.dtype)
    same = have == (zarr_format, shape, chunks, shards, dtype)
    return a if same and a.attrs.get(_MARK) == mark and a.nchunks_initialized == a.nchunks else None


_SIDE = 1024
_MARK = "zarr_dask_gpu_sample"


def _mark(compressors: Any) -> str:
    """What a complete sample store records, so that one written otherwise is not taken for it."""
    return f"complete; compressors={compressors!r}"
