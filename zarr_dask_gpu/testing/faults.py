"""Faults on demand, for tests of containment (docs/design.md, "Containment of CUDA faults").

While installed, a backend's decode of a batch that names one of the given chunk keys (``c/1/2`` in
any array, or ``<array path>/c/1/2``) faults: on the GPU a kernel writes through a null device pointer,
a real sticky ``cudaErrorIllegalAddress`` that the GPU path then meets as it would a faulting
decoder's; on the CPU the same ``DeviceFaultError`` is raised, simulated. ``faulting`` installs it in
this process; ``FaultPlugin`` in every worker of a cluster, a worker its nanny restarts included.
Nothing in the package calls this module.
"""

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
from distributed import Worker
from distributed.diagnostics.plugin import WorkerPlugin

from .. import backends
from ..distributed import containment
from ..plan import BlockRequest

SIMULATED = "cudaErrorIllegalAddress: an illegal memory access was encountered (simulated)"

_NULL_WRITE = r"""
extern "C" __global__ void zarr_dask_gpu_fault(unsigned long long* p) { p[threadIdx.x] = 1; }
"""


def named(blocks: Sequence[BlockRequest], keys: frozenset[str]) -> bool:
    """Whether a chunk of the batch is named in ``keys``."""
    return any(
        key in keys or f"{info.location}/{key}" in keys
        for info, pieces, *_ in blocks
        for key in (info.chunk_key(p.coords) for p in pieces)
    )


@contextlib.contextmanager
def faulting(keys: Iterable[str]) -> Iterator[None]:
    """Inside, this process's decodes of batches that name one of ``keys`` fault."""
    undo = _install(frozenset(keys))
    try:
        yield
    finally:
        undo()


class FaultPlugin(WorkerPlugin):
    """``faulting(keys)`` in each worker it is registered with (``client.register_plugin``); the
    scheduler sets it up again in a worker that replaces one."""

    name = "zarr-dask-gpu-faults"

    def __init__(self, keys: Iterable[str]) -> None:
        self.keys = frozenset(keys)
        self._undo: Callable[[], None] | None = None

    def setup(self, worker: Worker) -> None:
        self._undo = _install(self.keys)

    def teardown(self, worker: Worker) -> None:
        if self._undo is not None:
            self._undo()


def _install(keys: frozenset[str]) -> Callable[[], None]:
    cpu = backends.CpuBackend.decode_many

    def decode_many(self: backends.CpuBackend, blocks: Sequence[BlockRequest]) -> Any:
        if named(blocks, keys):
            raise containment.fault(blocks, SIMULATED, sticky=True)
        return cpu(self, blocks)

    backends.CpuBackend.decode_many = decode_many  # type: ignore[method-assign]
    undo_gpu = _install_gpu(keys)

    def undo() -> None:
        backends.CpuBackend.decode_many = cpu  # type: ignore[method-assign]
        undo_gpu()

    return undo


def _install_gpu(keys: frozenset[str]) -> Callable[[], None]:
    """Around the GPU backend's reads and decodes of a batch (``faults.batch``, where its CUDA errors
    are mapped to the batch's chunks), the null write on the task's stream first, waited for: the
    wait raises the sticky error inside the batch, as a faulting decoder's would."""
    try:
        import cupy as cp

        from ..gpu.runtime import faults
        from ..gpu.runtime.sync import wait
    except ImportError:  # no GPU libraries: the CPU backend only
        return lambda: None
    batch = faults.batch

    @contextlib.contextmanager
    def faulting_batch(blocks: Sequence[BlockRequest]) -> Iterator[None]:
        with batch(blocks):
            if named(blocks, keys):  # the error is raised here, in the faulting batch, and mapped
                _fault_kernel()((1,), (1,), (np.uint64(0),))
                wait(cp.cuda.get_current_stream())
            yield

    faults.batch = faulting_batch
    return lambda: setattr(faults, "batch", batch)


@functools.cache
def _fault_kernel() -> Any:
    import cupy as cp

    return cp.RawKernel(_NULL_WRITE, "zarr_dask_gpu_fault")
