"""Sample zarr stores for the demo and the benchmark: float32, a realistic compression ratio (~3)."""

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
    if os.path.exists(os.path.join(path, "zarr.json" if zarr_format == 3 else ".zarray")):
        try:
            a = zarr.open_array(path, mode="r")
        except Exception:  # not an array of ours: written anew below
            a = None
        if (
            a is not None
            and a.shape == (rows, _COLS)
            and a.chunks == chunks
            and a.shards == shards
            and a.attrs.get(_MARK) == _mark(compressors)
            and a.nchunks_initialized == a.nchunks  # every chunk (shard) written: none left half-done
        ):
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


_MARK = "zarr_dask_gpu_sample"


def _mark(compressors: Any) -> str:
    """What a complete sample store records, so that one written otherwise is not taken for it."""
    return f"complete; compressors={compressors!r}"
