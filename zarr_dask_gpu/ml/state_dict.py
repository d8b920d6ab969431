"""Model weights as zarr: ``save_state_dict`` and ``load_state_dict`` for torch state dicts.

A state dict is a zarr v3 group with one array per tensor (in the dict's order, listed in the
group's attributes). Dtypes numpy lacks (bfloat16, the float8 kinds) are stored exactly, as their
raw bits (uint16, uint8), with the tensor's dtype in the array's ``torch_dtype`` attribute. Loading
groups the tensors into read tasks of about ``block-size`` bytes (``task.read_regions``): on the GPU
a task reads all its tensors' chunks in one batch of preads and decodes them in one nvCOMP batch per
compression, and the tasks run at once, each on its own CUDA stream. Imports torch.
"""

import math
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, cast

import dask
import numpy as np
import zarr
from dask.array.core import normalize_chunks
from zarr.codecs import ZstdCodec

from .. import config
from ..errors import ZarrGpuError
from ..extras import require
from ..resolve import open_array_info, open_group
from ..task import read_regions, region_of, select
from .tensors import as_tensor

if TYPE_CHECKING:
    import torch
else:
    torch = require("torch", "zarr_dask_gpu.ml.state_dict")

_KIND = "torch state dict"
# torch dtypes without a numpy dtype, stored as raw bits of the same size
_RAW_BITS = {
    "bfloat16": torch.uint16,
    **{k: torch.uint8 for k in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")},
}


class StateDictMismatchError(ZarrGpuError, ValueError):
    """A stored state dict does not match the expected one (names, shapes or dtypes)."""


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _host_view(t: torch.Tensor) -> np.ndarray:
    """The tensor's values on the host as numpy, raw bits for dtypes numpy lacks (no copy on CPU)."""
    t = t.detach().to("cpu").contiguous()
    raw = _RAW_BITS.get(_name(t.dtype))
    return (t.view(raw) if raw is not None else t).numpy()


def _layout(shape: tuple[int, ...], itemsize: int, chunk_bytes: int, shard_bytes: int) -> tuple[Any, Any]:
    """Chunks of about ``chunk_bytes``; shards of about ``shard_bytes`` (whole chunks along the first
    axis) for tensors larger than one shard."""
    if not shape or 0 in shape:  # scalars and empty tensors: one chunk (zarr wants sizes >= 1)
        return tuple(max(n, 1) for n in shape), None
    chunks = tuple(
        c[0] for c in normalize_chunks("auto", shape, limit=chunk_bytes, dtype=np.dtype(f"u{itemsize}"))
    )
    nbytes = math.prod(shape) * itemsize
    if nbytes <= shard_bytes:
        return chunks, None
    per = max(shard_bytes // (math.prod(chunks) * itemsize), 1)
    return chunks, (min(per, -(-shape[0] // chunks[0])) * chunks[0], *chunks[1:])


def save_state_dict(
    state_dict: Mapping[str, torch.Tensor],
    path: str | os.PathLike,
    *,
    compressors: Any = "zstd",
    chunk_bytes: int = 8 << 20,
    shard_bytes: int = 256 << 20,
    overwrite: bool = False,
) -> None:
    """Write a dict of tensors as a zarr v3 group at ``path``.

    Parameters
    ----------
    state_dict
        Tensor names to tensors (any device; they are copied to the host to be written).
    compressors
        "zstd" (default), None for raw chunks, or zarr codecs as for ``zarr.create_array``.
    chunk_bytes, shard_bytes
        Chunk size, and the shard size of tensors larger than one shard.
    overwrite
        Replace an existing group; otherwise an existing path raises.
    """
    codecs = ZstdCodec(level=3) if compressors == "zstd" else compressors
    root = zarr.open_group(os.fspath(path), mode="w" if overwrite else "w-", zarr_format=3)
    root.attrs["zarr_dask_gpu"] = {"kind": _KIND, "tensors": list(state_dict)}
    for name, tensor in state_dict.items():
        host = _host_view(tensor)
        chunks, shards = _layout(host.shape, host.itemsize, chunk_bytes, shard_bytes)
        a = root.create_array(
            name,
            shape=host.shape,
            dtype=host.dtype,
            chunks=chunks,
            shards=shards,
            compressors=codecs,
            attributes={"torch_dtype": _name(tensor.dtype)},
        )
        a[...] = host


type Devices = str | torch.device | Sequence[str | torch.device] | Mapping[str, str | torch.device]


def load_state_dict(
    path: str | os.PathLike,
    device: Devices = "cuda",
    *,
    expected: Mapping[str, torch.Tensor] | None = None,
    slices: Mapping[str, tuple[slice, ...]] | None = None,
) -> dict[str, torch.Tensor]:
    """Read a state dict written by ``save_state_dict`` as tensors on ``device``.

    Parameters
    ----------
    device
        Where the tensors go: one device ("cuda", the current GPU; "cuda:N"; "cpu"), a list of
        devices (the tensors spread over them, balanced by bytes) or a mapping from every tensor's
        name to its device. A GPU's tensors are read with kvikio and decoded with nvCOMP on that GPU,
        by threads bound to it; the devices' reads run at once.
    expected
        A state dict (a model's ``state_dict()``) to check names, shapes and dtypes against before
        anything is read (shapes after ``slices``).
    slices
        Tensor names to the part of each to read (an index tuple of slices), such as one rank's
        rows for tensor parallelism: only the chunks that part touches are read.

    Raises
    ------
    StateDictMismatchError
        The stored tensors differ from ``expected``.
    ChunkDecodeError
        A chunk is damaged; the message names the tensor's array and the key.
    """
    root = open_group(path)
    meta = root.attrs.get("zarr_dask_gpu", {})
    if not isinstance(meta, dict) or meta.get("kind") != _KIND:
        raise StateDictMismatchError(f"{path} is not a state dict written by save_state_dict")
    arrays = {str(name): cast(zarr.Array, root[str(name)]) for name in meta["tensors"]}
    dtypes = {name: getattr(torch, str(a.attrs["torch_dtype"])) for name, a in arrays.items()}
    unknown = set(slices or ()) - set(arrays)
    if unknown:
        raise StateDictMismatchError(f"slices name tensors not in {path}: {sorted(unknown)}")
    places = placement({n: a.nbytes for n, a in arrays.items()}, device)
    infos = {n: open_array_info(a) for n, a in arrays.items()}
    regions = {n: region_of((slices or {}).get(n, ...), a.shape) for n, a in arrays.items()}
    if expected is not None:
        shapes = {
            n: np.broadcast_to(np.empty((), np.uint8), _size(r))[r[2]].shape for n, r in regions.items()
        }
        _check(path, shapes, dtypes, expected)
    groups: dict[torch.device, list[str]] = {}
    for name in arrays:
        groups.setdefault(places[name], []).append(name)

    def read(dev: torch.device) -> dict[str, Any]:
        """The device's tensors, in read tasks of about ``block-size`` bytes each."""
        kind = "cpu" if dev.type == "cpu" else "gpu"
        batches = _batches(
            groups[dev],
            {n: math.prod(_size(regions[n])) * arrays[n].dtype.itemsize for n in groups[dev]},
            config.block_size(kind),
        )
        tasks = [
            dask.delayed(read_regions)(
                dask.delayed([(infos[n], *regions[n][:2]) for n in batch], traverse=False), kind, False
            )
            for batch in batches
        ]
        done = _compute(dev, tasks)
        return {
            n: select(b, regions[n][2])
            for batch, bs in zip(batches, done, strict=True)
            for n, b in zip(batch, bs, strict=True)
        }

    with ThreadPoolExecutor(len(groups)) as ex:  # every device's reads at once
        blocks = {n: b for part in ex.map(read, groups) for n, b in part.items()}
    out = {}
    for name in arrays:
        t = as_tensor(blocks[name])
        out[name] = t.view(dtypes[name]) if _name(dtypes[name]) in _RAW_BITS else t
    return out


def _size(region: tuple) -> tuple[int, ...]:
    return tuple(b - a for a, b in zip(region[0], region[1], strict=True))


def _batches(names: list[str], nbytes: Mapping[str, int], limit: int) -> list[list[str]]:
    """Consecutive tensors grouped into read tasks of about ``limit`` bytes (at least one each)."""
    batches: list[list[str]] = []
    size = 0
    for name in names:
        if not batches or size + nbytes[name] > limit:
            batches.append([])
            size = 0
        batches[-1].append(name)
        size += nbytes[name]
    return batches


def placement(nbytes: Mapping[str, int], device: Devices) -> dict[str, torch.device]:
    """Each tensor's device: ``device`` itself, the least loaded (by bytes, largest tensors first) of
    a list of devices, or a mapping's entry for every tensor. "cuda" without an index is the
    current GPU."""
    if isinstance(device, Mapping):
        missing, extra = set(nbytes) - set(device), set(device) - set(nbytes)
        if missing or extra:
            raise StateDictMismatchError(
                f"the device mapping must name every tensor read: missing {sorted(missing)}, "
                f"not in the state dict {sorted(extra)}"
            )
        return {n: _device(device[n]) for n in nbytes}
    if isinstance(device, str | torch.device):
        return dict.fromkeys(nbytes, _device(device))
    devices = [_device(d) for d in device]
    if not devices:
        raise ValueError("device: an empty list of devices")
    load = dict.fromkeys(devices, 0)  # duplicates count once
    out = {}
    for name in sorted(nbytes, key=lambda n: -nbytes[n]):
        target = min(load, key=load.__getitem__)
        out[name] = target
        load[target] += nbytes[name]
    return out


def _device(d: str | torch.device) -> torch.device:
    dev = torch.device(d)
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda', 'cuda:N' or 'cpu', got {d!r}")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def _compute(device: torch.device, tasks: list[Any]) -> tuple[Any, ...]:
    """Compute ``tasks`` on threads bound to ``device`` (cupy's current device is per thread)."""
    workers = min(len(tasks), os.cpu_count() or 1)
    if device.type == "cpu":
        return dask.compute(*tasks, scheduler="threads", num_workers=workers)
    with ThreadPoolExecutor(workers, initializer=_use_gpu, initargs=(device.index,)) as pool:
        return dask.compute(*tasks, scheduler="threads", pool=pool)


def _use_gpu(index: int) -> None:
    import cupy

    cupy.cuda.Device(index).use()


def _check(
    path: Any,
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, torch.dtype],
    expected: Mapping[str, torch.Tensor],
) -> None:
    missing, extra = set(expected) - set(shapes), set(shapes) - set(expected)
    problems = [f"missing tensors: {sorted(missing)}"] if missing else []
    problems += [f"unexpected tensors: {sorted(extra)}"] if extra else []
    for name in sorted(set(expected) & set(shapes)):
        want = expected[name]
        if tuple(shapes[name]) != tuple(want.shape) or dtypes[name] != want.dtype:
            problems.append(
                f"{name}: stored {tuple(shapes[name])} {_name(dtypes[name])}, "
                f"expected {tuple(want.shape)} {_name(want.dtype)}"
            )
    if problems:
        raise StateDictMismatchError(f"state dict at {path} does not match: " + "; ".join(problems))
