"""Containment of CUDA faults in a worker process; imports no GPU library.

A sticky CUDA error (an illegal address, a launch failure, ...) leaves the process's CUDA context
unusable: every later CUDA call of the process fails with it, and the device blocks the worker holds
are unreachable. Once the GPU backend maps one (``gpu/runtime/faults.py``), the process is *poisoned*:

- the task that saw it first raises ``DeviceFaultError`` naming its batch's chunks, so that the
  scheduler records that task as erred and does not run it on another worker (where the same damaged
  chunk would fault again);
- every other task of the process that is doing device work, or starts a read, is innocent: it waits
  for the process to end (at most ``RESTART_WAIT`` seconds) rather than erring, so that the scheduler
  reschedules it on a fresh worker;
- ``GpuReadPlugin`` closes the worker once the first task's error has been sent to the scheduler, and
  the worker's nanny starts a fresh process, with a fresh CUDA context (docs/design.md).

The first task to see a sticky error is taken for the one whose batch faulted: with several task
threads, the error may surface in another thread's task first, which then errs in its place (the faulting
task is then rescheduled and faults again on the fresh worker, where it is found).

``testing/faults.py`` makes faults on demand for the tests of all this.
"""

import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

from ..errors import DeviceFaultError

logger = logging.getLogger(__name__)

# CUDA errors after which a context is unusable (the runtime's and the driver's codes are the same)
STICKY: dict[int, tuple[str, str]] = {
    214: ("cudaErrorECCUncorrectable", "CUDA_ERROR_ECC_UNCORRECTABLE"),
    220: ("cudaErrorNvlinkUncorrectable", "CUDA_ERROR_NVLINK_UNCORRECTABLE"),
    700: ("cudaErrorIllegalAddress", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    702: ("cudaErrorLaunchTimeout", "CUDA_ERROR_LAUNCH_TIMEOUT"),
    709: ("cudaErrorContextIsDestroyed", "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    710: ("cudaErrorAssert", "CUDA_ERROR_ASSERT"),
    714: ("cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    715: ("cudaErrorIllegalInstruction", "CUDA_ERROR_ILLEGAL_INSTRUCTION"),
    716: ("cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS"),
    717: ("cudaErrorInvalidAddressSpace", "CUDA_ERROR_INVALID_ADDRESS_SPACE"),
    718: ("cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC"),
    719: ("cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED"),
    999: ("cudaErrorUnknown", "CUDA_ERROR_UNKNOWN"),  # a context in an unknown state is not trusted
}
_STICKY_NAME = re.compile(r"\b(?:" + "|".join(n for names in STICKY.values() for n in names) + r")\b")

RESTART_WAIT = 60.0
"""Seconds an innocent task of a poisoned process waits for the restart before it raises."""

_lock = threading.Lock()
_fault: DeviceFaultError | None = None  # the process's first sticky fault
_fault_thread: int | None = None  # the thread whose task raised it
_healing = False  # a worker plugin closes this process's worker after a sticky fault
_woken = threading.Event()  # set by reset(): waiting tasks stop waiting


def is_sticky(status: int | None) -> bool:
    """A CUDA runtime or driver error code after which the context is unusable."""
    return status in STICKY


def names_sticky(text: str) -> bool:
    """The text of an error (kvikio's, a library's) names a sticky CUDA error."""
    return _STICKY_NAME.search(text) is not None


def poisoned() -> bool:
    """A sticky CUDA fault has been seen in this process: its CUDA context is unusable."""
    return _fault is not None


def first_fault() -> DeviceFaultError | None:
    """The process's first sticky fault, if any."""
    return _fault


def heal_on_fault(on: bool = True) -> None:
    """Set by ``GpuReadPlugin`` on its worker: after a sticky fault the worker is closed (and its
    nanny starts a fresh process), so innocent tasks wait for that rather than erring."""
    global _healing
    _healing = on


def describe(parts: Iterable[tuple[Any, ...]]) -> tuple[str, tuple[str, ...]]:
    """The store and chunk keys of a batch of ``(info, pieces, ...)``, as ``DeviceFaultError`` names
    them: keys as ``path/key`` when the batch reads several arrays."""
    parts = list(parts)
    stores = list(dict.fromkeys(part[0].location for part in parts))
    keys = dict.fromkeys(
        key if len(stores) == 1 else f"{info.location}/{key}"
        for info, pieces, *_ in parts
        for key in (info.chunk_key(p.coords) for p in pieces)
    )
    return ", ".join(stores), tuple(keys)


def fault(parts: Iterable[tuple[Any, ...]], reason: str, sticky: bool) -> DeviceFaultError:
    """The error that a task raises for a CUDA error of its device work on the batch ``parts``.

    A non-sticky error is just named. The first sticky one poisons the process and is returned at
    once (that task errs; the worker plugin then restarts the worker); one seen later by another
    task is collateral: that task waits for the restart (``innocent``)."""
    global _fault, _fault_thread
    store, keys = describe(parts)
    error = DeviceFaultError(store, keys, reason, sticky)
    if not sticky:
        return error
    me = threading.get_ident()
    with _lock:
        first = _fault is None
        if first:
            _fault, _fault_thread = error, me
        guilty = _fault_thread == me
    if first:
        logger.error("sticky CUDA fault, the process's CUDA context is lost: %s", error)
    return error if guilty else _wait(store, keys)


def innocent(parts: Iterable[tuple[Any, ...]]) -> DeviceFaultError:
    """In a poisoned process, a task that did not fault (it starts a read, or its device work fails
    only because the context is lost) waits for the worker's restart, which ends the process and has
    the scheduler run the task elsewhere; the error returned is raised only if no restart came."""
    return _wait(*describe(parts))


def _wait(store: str, keys: tuple[str, ...]) -> DeviceFaultError:
    first = _fault
    if _healing:
        _woken.wait(RESTART_WAIT)
        why = f"the worker was not restarted within {RESTART_WAIT:g} s"
    else:
        why = "no worker plugin restarts this process (cluster.connect registers GpuReadPlugin)"
    return DeviceFaultError(
        store, keys, f"the CUDA context was lost to an earlier fault ({first}); {why}", sticky=True
    )


def reset() -> None:
    """Test-only: forget a fault (the process is not really restarted) and wake waiting tasks."""
    global _fault, _fault_thread, _healing, _woken
    with _lock:
        _fault = _fault_thread = None
        _healing = False
        woken, _woken = _woken, threading.Event()
    woken.set()
