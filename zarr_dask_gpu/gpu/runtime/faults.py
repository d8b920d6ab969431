"""CUDA errors of a task's device work, raised as ``DeviceFaultError`` naming the chunks of its batch
(``containment`` decides who errs and who waits for the worker's restart)."""

import contextlib
import re
import threading
from collections.abc import Callable, Iterator, Sequence

import cupy as cp
from cupy_backends.cuda.api.driver import CUDADriverError
from cupy_backends.cuda.api.runtime import CUDARuntimeError

from ... import phases
from ...distributed import containment
from ...errors import ChunkDecodeError, DeviceFaultError
from ...phases import Phase
from ...plan import BlockRequest
from .sync import wait

CUDA_ERRORS = (CUDARuntimeError, CUDADriverError)
_OUT_OF_MEMORY = 2  # cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY: a MemoryError (BlockMemoryError)
_NVCOMP_CUDA = re.compile(r"\bstatus 1000\b")  # nvCOMP's "CUDA error", as decoders/decompress.py reports it
_task = threading.local()  # this thread's task: the blocks that its errors name


@contextlib.contextmanager
def settled(stream: Callable[[], cp.cuda.Stream]) -> Iterator[cp.cuda.Stream]:
    """Held for a whole task's device work on its stream (``stream()``), which it waits for at the end
    (asleep, the GIL released), with CUDA errors raised as in ``mapped``; not after a
    ``DeviceFaultError``, whose stream failed with the context."""
    _task.blocks = ()
    try:
        with mapped():
            s = stream()
        try:
            yield s
        except DeviceFaultError:
            raise
        except BaseException:
            with mapped():
                wait(s)  # the stream may still read the task's buffers
            raise
        with mapped(), phases.record(Phase.WAIT):
            wait(s)
    finally:
        _task.blocks = ()  # not its blocks kept alive until the thread's next task


@contextlib.contextmanager
def batch(blocks: Sequence[BlockRequest]) -> Iterator[None]:
    """Held around a task's reads and decodes of ``blocks``: CUDA errors name
    their chunks, here and at the task's stream wait."""
    _task.blocks = blocks
    with mapped():
        yield


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    """CUDA errors (cupy's runtime and driver errors, nvCOMP's status 1000, a library's error naming a
    sticky CUDA error) as ``DeviceFaultError`` of this task's blocks; a sticky one poisons the process
    (``containment.fault``). In a poisoned process any other error is collateral: the task waits for
    the restart (``containment.innocent``). An allocation failure is a ``MemoryError``."""
    try:
        yield
    except DeviceFaultError:
        raise
    except CUDA_ERRORS as e:
        if e.status == _OUT_OF_MEMORY:
            raise MemoryError(str(e)) from e
        raise containment.fault(_blocks(), str(e), containment.is_sticky(e.status)) from e
    except Exception as e:
        if containment.poisoned():
            raise containment.innocent(_blocks()) from e
        if isinstance(e, ChunkDecodeError) and _NVCOMP_CUDA.search(e.reason):
            status, text = _context_error()
            reason = f"nvCOMP reported a CUDA error ({e})" + (f"; the context: {text}" if text else "")
            raise containment.fault(_blocks(), reason, containment.is_sticky(status)) from e
        if not isinstance(e, ChunkDecodeError | MemoryError) and containment.names_sticky(str(e)):
            raise containment.fault(_blocks(), f"{type(e).__name__}: {e}", sticky=True) from e
        raise


def _blocks() -> Sequence[BlockRequest]:
    return getattr(_task, "blocks", ())


def _context_error() -> tuple[int | None, str]:
    """The error of this context, if it has one: a sticky error fails every call, a stream sync too."""
    try:
        cp.cuda.get_current_stream().synchronize()
    except CUDA_ERRORS as e:
        return e.status, str(e)
    return None, ""
