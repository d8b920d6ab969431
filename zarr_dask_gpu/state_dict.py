"""Model weights as zarr: ``save_state_dict`` and ``load_state_dict`` for torch state dicts.

A state dict is a zarr v3 group with one array per tensor (in the dict's order, listed in the
group's attributes). Dtypes numpy lacks (bfloat16, the float8 kinds) are stored exactly, as their
raw bits (uint16, uint8), with the tensor's dtype in the array's ``torch_dtype`` attribute. Loading
builds one read task per tensor and computes them together, so on the GPU the reads and decodes of
many tensors run at once, each task on its own CUDA stream. Imports torch.
"""

import math
import os
from collections.abc import Mapping
from typing import Any

import dask
import numpy as np
import torch
import zarr
from dask.array.core import normalize_chunks

from .errors import ZarrGpuError
from .graph import from_zarr_gpu
from .tensors import as_tensor

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
    codecs = zarr.codecs.ZstdCodec(level=3) if compressors == "zstd" else compressors
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


def load_state_dict(
    path: str | os.PathLike,
    device: str = "cuda",
    *,
    expected: Mapping[str, torch.Tensor] | None = None,
    slices: Mapping[str, tuple[slice, ...]] | None = None,
) -> dict[str, torch.Tensor]:
    """Read a state dict written by ``save_state_dict`` as tensors on ``device``.

    Parameters
    ----------
    device
        "cuda" (the current GPU: read with kvikio, decoded with nvCOMP, all tensors together) or
        "cpu".
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
    dev = {"cuda": "gpu", "cpu": "cpu"}.get(str(device))
    if dev is None:
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    root = zarr.open_group(os.fspath(path), mode="r")
    meta = root.attrs.get("zarr_dask_gpu", {})
    if meta.get("kind") != _KIND:
        raise StateDictMismatchError(f"{path} is not a state dict written by save_state_dict")
    arrays = {name: root[name] for name in meta["tensors"]}
    dtypes = {name: getattr(torch, a.attrs["torch_dtype"]) for name, a in arrays.items()}
    unknown = set(slices or ()) - set(arrays)
    if unknown:
        raise StateDictMismatchError(f"slices name tensors not in {path}: {sorted(unknown)}")
    lazy = {
        name: from_zarr_gpu(a, chunks=-1, device=dev)[(slices or {}).get(name, ...)]
        for name, a in arrays.items()
    }
    if expected is not None:
        _check(path, {n: x.shape for n, x in lazy.items()}, dtypes, expected)
    workers = min(len(lazy), os.cpu_count() or 1) or 1
    blocks = dask.compute(*lazy.values(), scheduler="threads", num_workers=workers)
    out = {}
    for name, block in zip(arrays, blocks, strict=True):
        t = as_tensor(block)
        out[name] = t.view(dtypes[name]) if _name(dtypes[name]) in _RAW_BITS else t
    return out


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
