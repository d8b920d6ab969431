"""xarray: ``zarr_dask_gpu.open_dataset`` and the ``zarr_gpu`` engine.

Data variables are dask arrays from this package's graph builder (cupy blocks and cupy ``meta`` on
the GPU); dimension coordinates, small coordinates and non-numeric variables are read on the host as
numpy. Metadata, attributes and encodings come from xarray's own zarr store, and CF decoding is
xarray's choice of steps, applied lazily block by block in forms that run on cupy blocks
(``cf``), so values and dtypes match ``engine="zarr"``. This module
imports on machines without cupy, kvikio or nvCOMP.
"""

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import numpy as np
import xarray as xr
import zarr
from dask.array.core import normalize_chunks
from dask.base import is_dask_collection
from xarray.backends import BackendEntrypoint
from xarray.backends.common import NONE_VAR_NAME, _normalize_path
from xarray.backends.zarr import ZarrStore
from xarray.core import indexing
from xarray.core.treenode import NodePath
from xarray.core.utils import Default, either_dict_or_kwargs
from xarray.namedarray.daskmanager import DaskManager

from ..device import Device, resolve_device
from ..errors import UnsupportedLayoutError, ZarrGpuError
from ..graph import default_block_size, from_zarr_gpu
from ..plan import block_chunks
from ..resolve import open_array_info
from . import cf

_DEFAULT = Default.token  # xarray's "argument not given"
ReadMode = Literal["r", "r+", "a", "a-"]  # the modes of engine="zarr" that leave a store as it is

# coordinates up to this size go to the host with the indexes; larger ones stay lazy on the device
HOST_COORD_BYTES = 16 << 20


def _blocks(chunks: Any, dims: tuple[str, ...], array: Any, device: Device) -> Any:
    """xarray's ``chunks`` for one variable, in ``from_zarr_gpu``'s terms."""
    if isinstance(chunks, Mapping):
        info = open_array_info(array)
        default = block_chunks(
            None, info.shape, info.grid, info.dtype, default_block_size(info, device), info.location
        )
        out = []
        for d, size, axis_default in zip(dims, info.shape, default, strict=True):
            want = chunks.get(d)
            out.append(axis_default if want is None else (size if want == -1 else want))
        return tuple(out)
    return chunks


def _coordinate_names(variables: Mapping[str, xr.Variable]) -> set[str]:
    names = {str(d) for v in variables.values() for d in v.dims}
    for v in variables.values():
        names.update(str(v.attrs.get("coordinates", "")).split())
    return names


def open_dataset(
    store: Any,
    *,
    group: str | None = None,
    chunks: Any = {},  # noqa: B006 (xarray's convention: {} means the engine's preferred blocks)
    device: str = "auto",
    consolidated: bool | None = None,
    drop_variables: str | Iterable[str] | None = None,
    mask_and_scale: bool = True,
    decode_times: bool = True,
    decode_timedelta: bool | None = None,
    use_cftime: bool | None = None,
    concat_characters: bool = True,
    decode_coords: bool | Literal["coordinates", "all"] = True,
    decode_cf: bool = True,
    strict: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    use_zarr_fill_value_as_mask: bool | None = None,
    cache_members: bool = True,
    mode: ReadMode = "r",
    zarr_store: ZarrStore | None = None,
    indexes: bool = True,
) -> xr.Dataset:
    """Open a zarr group as an xarray Dataset whose data variables are read on the GPU.

    Parameters
    ----------
    store
        What ``xr.open_dataset(engine="zarr")`` opens: a path or fsspec URL (with
        ``storage_options``), a ``pathlib``/``UPath`` object, a zarr ``Store`` object (an Icechunk
        session's store, an obstore ``ObjectStore``, ...) or a ``zarr.Group``; consolidated metadata
        is used when present.
    group
        A group inside the store.
    chunks
        ``{}`` (default): blocks of whole zarr chunks, about ``zarr_dask_gpu.block-size`` each;
        a dict of dimension names to sizes (other dimensions keep the default, -1 means whole);
        ``"auto"``, an int or a byte size as in ``from_zarr_gpu``; ``None`` loads every data
        variable onto the device now.
    device
        "gpu", "cpu" or "auto", as in ``from_zarr_gpu``.
    decode_cf, mask_and_scale, decode_times, decode_timedelta, use_cftime, concat_characters,
    decode_coords, drop_variables, consolidated, zarr_format, use_zarr_fill_value_as_mask,
    cache_members, mode
        As in ``xarray.open_dataset(engine="zarr")``.
    strict
        Raise for missing chunks instead of reading the fill value.
    zarr_store
        xarray's ``ZarrStore`` already open on the group (``store=`` of ``engine="zarr"``).
    indexes
        Make the dimension coordinates' indexes; False leaves them to xarray (the engine's way: its
        ``open_dataset`` makes them as ``create_default_indexes`` says).
    """
    zstore = zarr_store or ZarrStore.open_group(
        _normalize_path(store),
        mode=mode,
        group=group,
        consolidated=consolidated,
        consolidate_on_close=False,
        storage_options=storage_options,
        zarr_format=zarr_format,
        use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        cache_members=cache_members,
    )
    return _dataset(
        zstore,
        chunks=chunks,
        device=device,
        drop_variables=drop_variables,
        decoders=dict(
            mask_and_scale=mask_and_scale,
            decode_times=decode_times,
            decode_timedelta=decode_timedelta,
            use_cftime=use_cftime,
            concat_characters=concat_characters,
            decode_coords=decode_coords,
        ),
        decode_cf=decode_cf,
        strict=strict,
        indexes=indexes,
    )


def _dataset(
    zstore: ZarrStore,
    *,
    chunks: Any,
    device: str,
    drop_variables: str | Iterable[str] | None,
    decoders: dict[str, Any],
    decode_cf: bool,
    strict: bool | None,
    indexes: bool = True,
) -> xr.Dataset:
    """The Dataset of one group xarray's ``ZarrStore`` opened: its data variables this package's.
    Without ``indexes``, its dimension coordinates get none: xarray's ``open_dataset`` makes them
    as its ``create_default_indexes`` says."""
    dev = resolve_device(device)
    if isinstance(drop_variables, str):
        drop_variables = [drop_variables]
    drop = set(drop_variables or ())
    stored, attrs = zstore.load()  # names decoded as xarray's stores decode them (None's)
    encoding_of_source = zstore.get_encoding()
    variables = {k: v for k, v in stored.items() if k not in drop}
    members = zstore.members  # the arrays load read, not read again
    coords = _coordinate_names(variables)
    out: dict[Any, xr.Variable] = {}
    sources: dict[Any, Callable[[Any], Any]] = {}  # each device variable's read, for other blocks
    for name, var in variables.items():
        array = members[NONE_VAR_NAME if name is None else name]
        assert isinstance(array, zarr.Array), "load gives arrays"
        encoding = dict(var.encoding)
        numeric = np.dtype(var.dtype).kind in "biufc"
        if not numeric or name in var.dims or (name in coords and array.nbytes <= HOST_COORD_BYTES):
            data: Any = np.asarray(var.values)  # indexes and small coordinates live on the host
            if not numeric:
                encoding["zarr_gpu"] = f"read on the host: dtype {var.dtype} is not numeric"
        else:
            try:
                data = from_zarr_gpu(
                    array, chunks=_blocks(chunks, var.dims, array, dev), device=dev, strict=strict
                )
            except UnsupportedLayoutError as e:  # zarr-python's read, lazily, as engine="zarr" has it
                encoding["zarr_gpu"] = f"read on the host by zarr-python: {e}"
                out[name] = xr.Variable(var.dims, var._data, var.attrs, encoding)
                continue
            except ZarrGpuError as e:
                raise type(e)(f"variable {name!r}: {e}") from e
            encoding["zarr_gpu"] = f"dask array of {'cupy' if dev == 'gpu' else 'numpy'} blocks"
            # xarray's chunks= starts from these: this package's default blocks
            encoding["preferred_chunks"] = dict(zip(var.dims, (c[0] for c in data.chunks), strict=True))
            sources[name] = functools.partial(_read, name, array, dev, strict)
            data = cf.placeholder(data)
        out[name] = xr.Variable(var.dims, data, var.attrs, encoding)
    coord_names: set[Any] = set()
    if decode_cf:
        decoded, attrs, coord_names = xr.conventions.decode_cf_variables(out, attrs, **decoders)
        out = dict(decoded)
    out = {k: _device_variable(v, sources.get(k)) for k, v in out.items()}  # _data: still lazy
    # data and coordinate variables split as xarray's own store backend splits them
    coord_vars = {k: v for k, v in out.items() if k in coord_names or v.dims == (k,)}
    data_vars = {k: v for k, v in out.items() if k not in coord_vars}
    coordinates = coord_vars if indexes else xr.Coordinates(coord_vars, indexes={})
    ds = xr.Dataset(data_vars, coords=coordinates, attrs=attrs)
    ds.set_close(zstore.close)
    ds.encoding = encoding_of_source
    return ds.load() if chunks is None else ds


def _read(name: str, array: zarr.Array, device: Device, strict: bool | None, blocks: Any) -> Any:
    """Variable ``name``'s stored values as a dask array of this package's blocks ``blocks``."""
    try:
        return from_zarr_gpu(array, chunks=blocks, device=device, strict=strict)
    except ZarrGpuError as e:
        raise type(e)(f"variable {name!r}: {e}") from e


def _device_variable(var: xr.Variable, source: Callable[[Any], Any] | None) -> xr.Variable:
    """A decoded variable as the Dataset holds it: on the device, a ``DeviceVariable``."""
    if source is None or not cf.on_placeholder(var._data):
        return var
    return DeviceVariable(
        var.dims, cf.rebuild(var._data), var.attrs, var.encoding, decoded=var._data, source=source
    )


class DeviceVariable(xr.Variable):
    """A data variable of this engine: a dask array of this package's tasks (cupy blocks and meta on
    the GPU), CF-decoded block by block.

    xarray's ``chunks=`` (``open_dataset``, ``open_mfdataset``, ``Dataset.chunk``) would wrap a
    backend's variable and rebuild it with ``dask.array.from_array``, whose xarray wrapper forces
    numpy ``meta`` and a host copy of each block, and whose tasks would each run a dask compute of
    the variable. This variable instead answers ``chunk`` by building this package's graph anew for
    the blocks asked for (one task a block, its chunks read and decoded in one batch), and keeps its
    dask array when xarray wraps it against writes (a dask array is never written in place). Any
    operation on it gives a plain ``xarray.Variable``.
    """

    __slots__ = ("_decoded", "_name", "_source")

    def __init__(
        self,
        dims: Any,
        data: Any,
        attrs: Any = None,
        encoding: Any = None,
        fastpath: bool = False,
        *,
        decoded: Any = None,
        source: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__(dims, data, attrs, encoding, fastpath=fastpath)
        self._decoded, self._source = decoded, source
        self._name = getattr(data, "name", None)  # the read's own graph: changed data has another

    def _fresh(self) -> bool:
        """Its data is still the read it was built as (not loaded, assigned to or replaced)."""
        return (
            self._source is not None
            and is_dask_collection(self._data)
            and getattr(self._data, "name", None) == self._name
        )

    @property  # type: ignore[override]
    def data(self) -> Any:
        return xr.Variable.data.fget(self)  # type: ignore[attr-defined]

    @data.setter
    def data(self, value: Any) -> None:
        inner = value.array if isinstance(value, indexing.MemoryCachedArray) else value
        wrapped = getattr(inner, "array", None)  # CopyOnWriteArray(DaskIndexingAdapter(the array))
        if isinstance(inner, indexing.CopyOnWriteArray) and getattr(wrapped, "array", None) is self._data:
            return  # xarray's guard against writes: a dask array needs none
        xr.Variable.data.fset(self, value)  # type: ignore[attr-defined]
        self._source = None  # other data now: re-blocking it is dask's

    def _replace(
        self, dims: Any = _DEFAULT, data: Any = _DEFAULT, attrs: Any = _DEFAULT, encoding: Any = _DEFAULT
    ) -> Any:
        if data is not _DEFAULT and data is not self._data:  # an operation's result: a plain variable
            return xr.Variable(self.dims, self._data, self._attrs, self._encoding, fastpath=True)._replace(
                dims, data, attrs, encoding
            )
        new = super()._replace(dims, data, attrs, encoding)
        new._decoded, new._source, new._name = self._decoded, self._source, self._name
        return new

    @property
    def stored(self) -> zarr.Array | None:
        """The zarr array this variable reads, while it still holds that read (else None)."""
        source = self._source
        return source.args[1] if isinstance(source, functools.partial) and self._fresh() else None  # _read's

    @property
    def _chunks(self) -> tuple[tuple[int, ...], ...]:
        """The blocks of its dask array (asked only while ``_fresh``)."""
        return self._data.chunks  # type: ignore[union-attr]

    def _dask_auto_cuts(self, blocks: tuple[Any, ...]) -> bool:
        """``blocks`` are xarray's ``chunks="auto"``: dask's auto sizes grown from the preferred
        blocks, smaller than them (where the preferred blocks pass dask's ``array.chunk-size``, dask
        shrinks every axis alike and cuts the stored chunks); ``"auto"`` then reads the engine's
        blocks, as it does in ``from_zarr_gpu``."""
        preferred = self._chunks
        first = tuple(c[0] for c in preferred)
        auto = normalize_chunks(("auto",) * self.ndim, self.shape, dtype=self.dtype, previous_chunks=first)
        return tuple(blocks) == auto and any(a[0] < p[0] for a, p in zip(auto, preferred, strict=True))

    def chunk(  # type: ignore[override]
        self,
        chunks: Any = {},  # noqa: B006 (xarray's default: the preferred blocks)
        name: str | None = None,
        lock: bool | None = None,
        inline_array: bool | None = None,
        chunked_array_type: Any = None,
        from_array_kwargs: Any = None,
        **chunks_kwargs: Any,
    ) -> Any:
        chunks = either_dict_or_kwargs(chunks, chunks_kwargs, "chunk") if chunks_kwargs else chunks
        dask_manager = chunked_array_type in (None, "dask") or isinstance(chunked_array_type, DaskManager)
        if not (self._fresh() and dask_manager and isinstance(chunks, Mapping)):
            plain = xr.Variable(self.dims, self._data, self._attrs, self._encoding)
            return plain.chunk(chunks, name, lock, inline_array, chunked_array_type, from_array_kwargs)
        blocks = []
        for axis, (dim, current) in enumerate(zip(self.dims, self._chunks, strict=True)):
            want = chunks.get(dim, chunks.get(axis))
            blocks.append(current if want is None else want)
        if self._dask_auto_cuts(tuple(blocks)):
            blocks = list(self._chunks)
        base = self._source(tuple(blocks))  # type: ignore[misc]
        return xr.Variable(self.dims, cf.rebuild(self._decoded, base), self._attrs, self._encoding)


def open_groups_as_dict(
    store: Any,
    *,
    group: str | None = None,
    consolidated: bool | None = None,
    storage_options: dict[str, Any] | None = None,
    zarr_format: int | None = None,
    mode: ReadMode = "r",
    **kwargs: Any,
) -> dict[str, xr.Dataset]:
    """Every group of a zarr hierarchy (under ``group``, when given) as a Dataset, keyed by its path
    relative to that group ("/" for it), as ``xr.open_groups(engine="zarr")`` gives them.

    ``kwargs`` are those of ``open_dataset``.
    """
    parent = str(NodePath("/") / NodePath(group)) if group else "/"
    stores = ZarrStore.open_store(
        _normalize_path(store),
        group=parent,
        mode=mode,
        consolidated=consolidated,
        consolidate_on_close=False,
        storage_options=storage_options,
        zarr_format=zarr_format,
    )
    chunks = kwargs.pop("chunks", {})
    device = kwargs.pop("device", "auto")
    drop = kwargs.pop("drop_variables", None)
    decode_cf = kwargs.pop("decode_cf", True)
    strict = kwargs.pop("strict", None)
    out = {}
    for path, zstore in stores.items():
        name = str(NodePath(path).relative_to(parent)) if group else str(NodePath(path))
        out["/" if name == "." else name] = _dataset(
            zstore,
            chunks=chunks,
            device=device,
            drop_variables=drop,
            decoders=kwargs,
            decode_cf=decode_cf,
            strict=strict,
        )
    return out


def open_datatree(store: Any, **kwargs: Any) -> xr.DataTree:
    """A zarr hierarchy as an xarray DataTree; ``kwargs`` are those of ``open_groups_as_dict``."""
    return xr.DataTree.from_dict(open_groups_as_dict(store, **kwargs))


class ZarrGpuBackendEntrypoint(BackendEntrypoint):
    """``xr.open_dataset(path, engine="zarr_gpu", chunks={})``: data variables read on the GPU.

    The variables are ``DeviceVariable``s: xarray's ``chunks=`` (``{}``, a dict of dimension sizes,
    ``"auto"``) builds this package's graph for the blocks it asks for. ``blocks=`` (the forms of
    ``open_dataset``'s ``chunks``) is an alias, for the engine's own choice of blocks.
    """

    description = "Zarr v2/v3 read onto GPUs with kvikio and nvCOMP (zarr-dask-gpu)"
    url = "https://github.com/zarr-dask-gpu/zarr-dask-gpu"
    open_dataset_parameters = (
        "filename_or_obj",
        "drop_variables",
        "mask_and_scale",
        "decode_times",
        "concat_characters",
        "decode_coords",
        "use_cftime",
        "decode_timedelta",
        "group",
        "consolidated",
        "device",
        "blocks",
        "strict",
        "storage_options",
        "zarr_format",
        "use_zarr_fill_value_as_mask",
        "cache_members",
        "mode",
        "store",
        "engine",
    )

    def open_dataset(  # type: ignore[override]
        self,
        filename_or_obj: Any,
        *,
        blocks: Any = None,
        store: ZarrStore | None = None,
        engine: Any = None,
        **kwargs: Any,
    ) -> xr.Dataset:
        # xarray passes the decoders named in open_dataset_parameters, and the backend kwargs; a
        # ZarrStore it opened itself comes as store= (open_zarr), as to engine="zarr"
        blocks = {} if blocks is None else blocks
        # as engine="zarr" (xarray 2026.9) does, which leaves the argument to open_zarr's own store
        kwargs["use_zarr_fill_value_as_mask"] = None
        return open_dataset(filename_or_obj, chunks=blocks, zarr_store=store, indexes=False, **kwargs)

    def open_groups_as_dict(self, filename_or_obj: Any, **kwargs: Any) -> dict[str, xr.Dataset]:  # type: ignore[override]
        blocks = kwargs.pop("blocks", None)
        return open_groups_as_dict(filename_or_obj, chunks={} if blocks is None else blocks, **kwargs)

    def open_datatree(self, filename_or_obj: Any, **kwargs: Any) -> xr.DataTree:  # type: ignore[override]
        return xr.DataTree.from_dict(self.open_groups_as_dict(filename_or_obj, **kwargs))

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        return False  # never taken over from engine="zarr" unless asked for by name
