"""A sample zarr v3 store for the demo and the benchmark: float32, zstd, a realistic ratio (~3)."""

import os

import numpy as np
import zarr

_COLS = 1 << 20  # one row is 4 MiB of float32


def write_sample(path: str | os.PathLike, nbytes: int, chunk_bytes: int = 8 << 20) -> zarr.Array:
    """Write (or reuse, if it already matches) a 2-d float32 array of about ``nbytes``.

    Rows are a smooth wave plus noise rounded to 0.1, which zstd compresses about threefold, like
    gridded geophysical fields. Chunks are whole rows of ``chunk_bytes``; the codecs are zarr v3's
    defaults (bytes, zstd).
    """
    rows_per_chunk = max(chunk_bytes // (_COLS * 4), 1)
    rows = max(nbytes // (_COLS * 4), rows_per_chunk)
    if os.path.exists(os.path.join(path, "zarr.json")):
        a = zarr.open_array(path, mode="r")
        if a.shape == (rows, _COLS) and a.chunks == (rows_per_chunk, _COLS):
            return a
    a = zarr.create_array(
        path, shape=(rows, _COLS), chunks=(rows_per_chunk, _COLS), dtype="f4", overwrite=True
    )
    rng = np.random.default_rng(0)
    t = np.linspace(0, 40 * np.pi, _COLS, dtype=np.float32)
    slab = max(rows_per_chunk, 64 // rows_per_chunk * rows_per_chunk)
    for r in range(0, rows, slab):
        n = min(slab, rows - r)
        noise = rng.standard_normal((n, _COLS), dtype=np.float32)
        a[r : r + n] = np.round(np.sin(t + r)[None, :] * 10 + noise, 1)
    return a
