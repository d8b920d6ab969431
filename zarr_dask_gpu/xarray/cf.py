"""CF decoding of variables whose blocks live on the device.

xarray's decoders (mask and scale, ``_Unsigned``, bool, byte order, times) wrap a dask variable in
``map_blocks`` of functions written for numpy: ``_apply_mask`` starts with ``np.array(block)``,
which cupy refuses. So the decoders run on a placeholder instead, leaving the chain of element-wise
steps they chose (xarray's own fill values, dtypes and scale factors), and ``rebuild`` applies that
chain to the dask array with forms of the steps that run on numpy and cupy blocks alike. A step not
known here runs on a host copy of the block: correct, and slower; decoded times (datetime64,
timedelta64), which cupy cannot hold, stay on the host.
"""

import functools
from collections.abc import Callable
from typing import Any

import dask.array as da
import numpy as np
from xarray.backends.common import BackendArray
from xarray.coding import variables as cfv
from xarray.coding.common import _ElementwiseFunctionArray
from xarray.core import indexing


class _Placeholder(BackendArray):
    """Stands for a dask array while xarray's decoders run. They read a few values at most (the
    time decoder looks at the first and last to choose a dtype, as with engine="zarr"); those are
    read from the array and handed over in host memory."""

    def __init__(self, array: da.Array) -> None:
        self.array = array
        self.shape = array.shape
        self.dtype = array.dtype

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._read)

    def _read(self, key: tuple) -> np.ndarray:
        block = self.array[key].compute()
        return np.asarray(block.get() if hasattr(block, "get") else block)


def placeholder(array: da.Array) -> indexing.LazilyIndexedArray:
    """What to put in an ``xr.Variable`` in place of ``array`` before ``decode_cf_variables``."""
    return indexing.LazilyIndexedArray(_Placeholder(array))


def rebuild(data: Any, base: da.Array | None = None) -> Any:
    """The decoded dask array for a variable's data after decoding, if it stands on a placeholder
    (with ``base``: the same decoding over another dask array of the same values, other blocks);
    other data (host variables) as it is."""
    return _rebuild(data, base) if on_placeholder(data) else data


def on_placeholder(data: Any) -> bool:
    """The data of a decoded variable stands on a placeholder: a dask array of this package's."""
    while isinstance(data, _ElementwiseFunctionArray | cfv.NativeEndiannessArray | cfv.BoolTypeArray):
        data = data.array
    return isinstance(data, indexing.LazilyIndexedArray) and isinstance(data.array, _Placeholder)


def _rebuild(data: Any, base: da.Array | None) -> Any:
    if isinstance(data, _ElementwiseFunctionArray):
        return _rebuild(data.array, base).map_blocks(_device_step(data.func), dtype=data.dtype)
    if isinstance(data, cfv.NativeEndiannessArray | cfv.BoolTypeArray):
        return _rebuild(data.array, base).astype(data.dtype)
    array = data.array.array if base is None else base
    whole = all(k == slice(None) for k in data.key.tuple)
    return array if whole else array[data.key.tuple]


def _apply_mask(data: Any, encoded_fill_values: list, decoded_fill_value: Any, dtype: Any) -> Any:
    # xarray's _apply_mask, with astype in place of np.array
    data = data.astype(data.dtype if dtype is None else dtype, copy=True)
    if encoded_fill_values:
        condition = False
        for fv in encoded_fill_values:
            condition |= data == fv
        data[condition] = decoded_fill_value
    return data


def _as_dtype(data: Any, dtype: Any) -> Any:
    return data.astype(dtype)


def _on_host(func: Callable[[Any], Any], block: Any) -> Any:
    if not hasattr(block, "get"):  # numpy
        return func(block)
    import cupy as cp

    out = func(block.get())
    # cupy has no datetime64, timedelta64 or object arrays: decoded times stay in host memory
    return out if np.asarray(out).dtype.kind in "mMO" else cp.asarray(out)


def _device_step(func: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A form of one of xarray's element-wise decoding steps that runs on numpy and cupy blocks."""
    if isinstance(func, functools.partial):
        if func.func is cfv._apply_mask:
            return functools.partial(_apply_mask, *func.args, **func.keywords)
        if func.func is cfv._scale_offset_decoding:  # astype and in-place arithmetic: duck-typed
            return func
        if func.func is np.asarray and set(func.keywords) == {"dtype"} and not func.args:
            return functools.partial(_as_dtype, dtype=func.keywords["dtype"])
    return functools.partial(_on_host, func)
