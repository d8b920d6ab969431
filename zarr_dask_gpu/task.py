"""The worker-side read of one block: plan, read, decode, assemble."""

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from dask.array.slicing import normalize_index

from . import config, phases
from .backends import Backend, CpuBackend
from .device import Device
from .distributed import containment
from .errors import BlockMemoryError, MissingChunkError, StoreError
from .metadata import ArrayInfo
from .phases import Phase
from .plan import BlockRequest, block_pieces


@functools.cache
def get_backend(device: Device) -> Backend:
    """The process's backend for ``device`` (one per process: the GPU one holds streams and codecs)."""
    if device == "gpu":
        from .gpu.backend import GpuBackend  # imports cupy: only when a GPU task runs

        return GpuBackend()
    return CpuBackend()


def read_region(
    info: ArrayInfo, start: tuple[int, ...], stop: tuple[int, ...], device: Device, strict: bool
) -> Any:
    """The box ``[start, stop)`` of the array, as a numpy (cpu) or cupy (gpu) array.

    Missing chunks read as the fill value, or raise ``MissingChunkError`` when ``strict``.
    """
    return read_regions([(info, start, stop)], device, strict)[0]


def read_regions(
    boxes: Sequence[tuple[ArrayInfo, tuple[int, ...], tuple[int, ...]]], device: Device, strict: bool
) -> list[Any]:
    """``read_region`` of several boxes ``(info, start, stop)``, of one array or several, in one task:
    the backend reads and decodes their chunks together (one batch of preads, one nvCOMP batch per
    compression on the GPU). The settings are read once, as the task begins (``config.for_task``)."""
    try:
        with config.for_task():
            return _read_regions(boxes, device, strict)
    except FileNotFoundError as e:  # the store listed the chunk: its bytes are not where it says
        where = ", ".join(sorted({info.location for info, _, _ in boxes}))
        raise StoreError(
            where,
            "",
            f"a chunk the store lists is not there ({e}): the store changed while it was read, or "
            "its references name a file that is not there",
        ) from e
    except MemoryError as e:  # cupy's OutOfMemoryError too; a dask task must not hang on it
        where = "; ".join(f"[{a}, {b}) of {info.location}" for info, a, b in boxes)
        raise BlockMemoryError(
            f"block {where} ({device}) did not fit in memory: {e}; "
            "use smaller chunks or fewer threads per worker"
        ) from e


def _read_regions(
    boxes: Sequence[tuple[ArrayInfo, tuple[int, ...], tuple[int, ...]]], device: Device, strict: bool
) -> list[Any]:
    with phases.record(Phase.PLAN):
        pieces = [block_pieces(start, stop, info.chunks) for info, start, stop in boxes]
    if containment.poisoned():  # an earlier task's sticky CUDA fault: wait for the worker's restart
        raise containment.innocent(zip([info for info, _, _ in boxes], pieces, strict=True))
    backend = get_backend(device)
    xp = backend.xp
    shapes = [tuple(b - a for a, b in zip(start, stop, strict=True)) for _, start, stop in boxes]
    with backend.context():
        # made on the task's stream when the backend asks (the GPU one: once the chunks are read)
        make = [
            functools.partial(xp.empty, shape, dtype=info.dtype)
            for (info, _, _), shape in zip(boxes, shapes, strict=True)
        ]
        wanted = [k for k, ps in enumerate(pieces) if ps]
        done = backend.decode_many([BlockRequest(boxes[k][0], pieces[k], make[k]) for k in wanted])
        outs = dict(zip(wanted, (out for out, _ in done), strict=True))
        with phases.record(Phase.ASSEMBLE):
            for k, (out, present) in zip(wanted, done, strict=True):
                _fill_missing(boxes[k][0], pieces[k], present, out, strict)
            for k in set(range(len(boxes))) - set(wanted):  # an empty box
                outs[k] = make[k]()
                outs[k][...] = boxes[k][0].fill_value
        return [outs[k] for k in range(len(boxes))]


def _fill_missing(info: ArrayInfo, pieces: list, present: list[bool], out: Any, strict: bool) -> None:
    """The fill value where a chunk is missing, or ``MissingChunkError`` when ``strict``."""
    missing = [p for p, stored in zip(pieces, present, strict=True) if not stored]
    if missing and strict:
        c = missing[0].coords
        raise MissingChunkError(info.location, info.chunk_key(c), info.chunk_label(c) + "chunk is missing")
    for piece in missing:
        out[piece.block_sel] = info.fill_value


def region_of(index: Any, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], tuple]:
    """Split an index (any dask accepts: slices, integers, integer or boolean arrays, Ellipsis) into
    the box it touches and the selection to apply inside that box."""
    start: list[int] = []
    stop: list[int] = []
    post: list[Any] = []  # slices, ints and index arrays of the region's selection
    for ix, n in zip(normalize_index(index, shape), shape, strict=True):
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
        out = arr[post]  # numpy gives a scalar for a 0-d result; a dask block is an array
        return np.asarray(out) if isinstance(out, np.generic) else out
    for axis in reversed(range(len(post))):  # later axes first, so earlier ones keep their place
        arr = arr[(slice(None),) * axis + (post[axis],)]
    return arr
