"""torch tensors from zarr reads through DLPack, without copies; streaming and shuffled
IterableDatasets.

Imports torch; nothing else in the package imports this module.
"""

import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..extras import require
from ..graph import from_zarr_gpu
from .loader import SampleLoader

if TYPE_CHECKING:
    import torch
else:
    torch = require("torch", "zarr_dask_gpu.ml.tensors")


def as_tensor(block: Any) -> torch.Tensor:
    """A block (cupy or numpy array) as a torch tensor on the same device, sharing its memory.

    Blocks from ``from_zarr_gpu`` are complete on any stream when their task returns, so no stream
    synchronisation is needed.
    """
    if isinstance(block, np.generic):  # dask computes a 0-d numpy array to a scalar
        block = np.asarray(block)
    return torch.from_dlpack(block)


class ZarrBatches(torch.utils.data.IterableDataset):
    """Consecutive batches along the first axis of a zarr array, as tensors on the GPU (or CPU).

    Reads ``prefetch`` batches ahead in background threads while the caller computes on the current
    one, each read a ``from_zarr_gpu`` block (kvikio + nvCOMP on the GPU). Under a DataLoader with
    ``num_workers > 0`` each worker yields every ``num_workers``-th batch; with the GPU, use
    ``num_workers=0`` (the reads already run in threads) and ``batch_size=None``.

    Parameters
    ----------
    store, component
        The zarr array, as for ``from_zarr_gpu``.
    batch_size
        Rows per batch (the last batch may be shorter).
    device
        "gpu", "cpu" or "auto".
    prefetch
        Batches read ahead.
    """

    def __init__(
        self,
        store: str | os.PathLike | Any,
        batch_size: int,
        *,
        component: str | None = None,
        device: str = "auto",
        prefetch: int = 2,
    ) -> None:
        super().__init__()
        if batch_size < 1 or prefetch < 1:
            raise ValueError(f"batch_size and prefetch must be positive, got {batch_size} and {prefetch}")
        shape = from_zarr_gpu(store, component, device=device).shape
        if not shape:
            raise ValueError("a 0-d array has no batches")
        self.array = from_zarr_gpu(store, component, chunks=(batch_size, *shape[1:]), device=device)
        self.prefetch = prefetch

    def __len__(self) -> int:
        return self.array.numblocks[0]

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        mine = range(len(self))[info.id :: info.num_workers] if info else range(len(self))
        with ThreadPoolExecutor(self.prefetch) as ex:
            ahead: deque[Future[Any]] = deque()
            for i in mine:
                ahead.append(ex.submit(self._read, i))
                if len(ahead) > self.prefetch:
                    yield as_tensor(ahead.popleft().result())
            while ahead:
                yield as_tensor(ahead.popleft().result())

    def _read(self, i: int) -> Any:
        return self.array.blocks[(i,) + (0,) * (self.array.ndim - 1)].compute(scheduler="sync")


class ZarrSamples(torch.utils.data.IterableDataset):
    """Shuffled batches of samples (indices along sample dims, or patches) of one or several zarr
    arrays or xarray variables, as dicts of tensors on the GPU (or CPU tensors), one share per rank.

    Every keyword is ``loader.SampleLoader``'s (``arrays``, ``variables``, ``sample_dims``, ``patch``,
    ``stride``, ``random_patches``, ``patches_per_epoch``, ``device``, ``seed``, ``shuffle``,
    ``shuffle_buffer``, ``drop_last``, ``prefetch``, ``memory_budget``, ``normalize``, ``strict``,
    ``gpu``). ``rank`` and ``world_size`` default to ``torch.distributed``'s when it is initialised,
    else 0 and 1; on the GPU the reads use torch's current CUDA device unless ``gpu`` says otherwise.
    Call ``set_epoch(epoch)`` before each epoch on every rank. Use ``num_workers=0`` in a
    ``DataLoader`` (the reads already run in threads), with ``batch_size=None``.
    """

    def __init__(
        self,
        arrays: Any,
        batch_size: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        dist = torch.distributed
        initialised = dist.is_available() and dist.is_initialized()
        if rank is None:
            rank = dist.get_rank() if initialised else 0
        if world_size is None:
            world_size = dist.get_world_size() if initialised else 1
        if kwargs.get("gpu") is None and kwargs.get("device", "auto") != "cpu" and torch.cuda.is_available():
            kwargs["gpu"] = torch.cuda.current_device()
        self.loader = SampleLoader(arrays, batch_size, rank=rank, world_size=world_size, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next iteration follows (the same on every rank)."""
        self.loader.set_epoch(epoch)

    def __len__(self) -> int:
        """Batches of this rank per epoch."""
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            raise RuntimeError("ZarrSamples reads in its own threads: use a DataLoader with num_workers=0")
        for batch in self.loader:
            yield {name: as_tensor(x) for name, x in batch.items()}
