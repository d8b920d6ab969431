"""The worker-side read of one block: plan, read, decode, assemble."""

from typing import Any

import numpy as np

from .backends import PLACED, get_backend
from .device import Device
from .errors import BlockMemoryError, MissingChunkError
from .metadata import ArrayInfo
from .plan import block_pieces


def read_region(
    info: ArrayInfo, start: tuple[int, ...], stop: tuple[int, ...], device: Device, strict: bool
) -> Any:
    """The box ``[start, stop)`` of the array, as a numpy (cpu) or cupy (gpu) array.

    Missing chunks read as the fill value, or raise ``MissingChunkError`` when ``strict``.
    """
    try:
        return _read_region(info, start, stop, device, strict)
    except MemoryError as e:  # cupy's OutOfMemoryError too; a dask task must not hang on it
        raise BlockMemoryError(
            f"block [{start}, {stop}) of {info.location} ({device}) did not fit in memory: {e}; "
            "use smaller chunks or fewer threads per worker"
        ) from e


def _read_region(
    info: ArrayInfo, start: tuple[int, ...], stop: tuple[int, ...], device: Device, strict: bool
) -> Any:
    backend = get_backend(device)
    xp = backend.xp
    shape = tuple(b - a for a, b in zip(start, stop, strict=True))
    pieces = block_pieces(start, stop, info.chunks)
    if not pieces:
        return xp.full(shape, info.fill_value, dtype=info.dtype)
    with backend.context():
        out = xp.empty(shape, dtype=info.dtype)  # made on the task's stream, decoded into there
        chunks = backend.decode(info, pieces, out)
        missing = [p for p, c in zip(pieces, chunks, strict=True) if c is None]
        if missing and strict:
            c = missing[0].coords
            raise MissingChunkError(
                info.location, info.chunk_key(c), info.chunk_label(c) + "chunk is missing"
            )
        for piece, chunk in zip(pieces, chunks, strict=True):
            if chunk is None:
                out[piece.block_sel] = info.fill_value
            elif chunk is not PLACED:
                out[piece.block_sel] = chunk[piece.chunk_sel]
        return out


def region_of(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple]:
    """Split an index (slices, integers, integer or boolean arrays) into the box it touches and the
    selection to apply inside that box."""
    start, stop, post = [], [], []
    for ix, n in zip(index, shape, strict=True):
        if isinstance(ix, slice):
            r = range(*ix.indices(n))
            if not len(r):
                lo, hi = 0, 0
                post.append(slice(0, 0))
            else:
                lo, hi = min(r[0], r[-1]), max(r[0], r[-1]) + 1
                end = r[-1] - lo + (1 if r.step > 0 else -1)
                post.append(slice(r[0] - lo, end if end >= 0 else None, r.step))
        elif isinstance(ix, int | np.integer):
            lo, hi = int(ix), int(ix) + 1
            post.append(0)
        else:  # an integer or boolean array
            ix = np.asarray(ix)
            ix = np.flatnonzero(ix) if ix.dtype == bool else np.where(ix < 0, ix + n, ix)
            lo, hi = (int(ix.min()), int(ix.max()) + 1) if ix.size else (0, 0)
            post.append(ix - lo)
        start.append(lo)
        stop.append(hi)
    return tuple(start), tuple(stop), tuple(post)


def select(arr: Any, post: tuple) -> Any:
    """Apply ``region_of``'s selection; several arrays index orthogonally, as dask means them."""
    if sum(isinstance(p, np.ndarray) for p in post) < 2:
        return arr[post]
    for axis in reversed(range(len(post))):  # later axes first, so earlier ones keep their place
        arr = arr[(slice(None),) * axis + (post[axis],)]
    return arr
