"""Decompressed chunk bytes to the chunk: filters or byte order, then the stored layout.

Written with the array module ``xp`` (numpy or cupy), so the device path's last step is checked on
the host too.
"""

from typing import Any

import numpy as np

from . import filters
from .chain import GpuChain, swap_unit


def logical_chunk(xp: Any, raw: Any, chunks: tuple[int, ...], dtype: np.dtype, chain: GpuChain) -> Any:
    """View decompressed bytes (uint8) as the chunk of shape ``chunks``: undo the filters or the
    byte order, then the stored layout (transpose, F order)."""
    if chain.filters:
        flat = filters.decode(xp, raw, chain.filter_configs(), dtype)
    else:
        if chain.big_endian and dtype.itemsize > 1:
            unit = swap_unit(dtype)
            raw = raw.reshape(-1, unit)[:, ::-1].copy().reshape(-1)
        flat = raw.view(dtype)
    if chain.f_order:
        return flat.reshape(chunks, order="F")
    if chain.transpose is not None:
        stored = tuple(chunks[i] for i in chain.transpose)
        return flat.reshape(stored).transpose(np.argsort(chain.transpose))
    return flat.reshape(chunks)
