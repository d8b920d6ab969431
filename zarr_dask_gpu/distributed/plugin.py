"""Per-process set-up of dask workers that read zarr onto GPUs, and their containment of CUDA faults."""

import asyncio
import logging
import os
import threading
import time
from typing import Any

from distributed import Worker, WorkerPlugin

from ..device import gpu_available
from . import containment

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 30.0
"""Seconds a poisoned worker's close may take before its process exits at once (as distributed's own
close of a worker in a broken state, ``worker._force_close``)."""

EXIT_GRACE = 15.0
"""Seconds after the close that a poisoned process under a nanny may take to exit (its exit handlers
might touch the lost CUDA context) before it exits at once."""


class GpuReadPlugin(WorkerPlugin):
    """Does each worker's GPU set-up when it starts (kvikio's IO thread pool, waits that sleep), so the
    first task pays nothing for it; on CPU-only workers it does nothing. Works on any dask or dask-cuda
    worker, including ``dask cuda worker`` processes started by hand:
    ``client.register_plugin(GpuReadPlugin())``.

    It also heals the worker after a sticky CUDA fault (``containment``): once a task has raised a
    sticky ``DeviceFaultError`` (the process's CUDA context is unusable), the worker is closed right
    after that task's error has been sent to the scheduler, so that the task stays erred and is not
    run again elsewhere. Under a nanny (``dask worker``, ``dask cuda worker``, ``LocalCluster``,
    ``LocalCUDACluster``) the nanny then starts a fresh worker process, and the scheduler recomputes
    the blocks the old one held and reschedules the tasks it was running. A worker without a nanny
    (``--no-nanny``) exits; an in-process worker (``processes=False``) is closed.
    """

    name = "zarr-dask-gpu"
    _worker: Worker | None = None
    _closing = False

    def setup(self, worker: Worker) -> None:
        self._worker = worker
        containment.heal_on_fault()  # innocent tasks of a poisoned process wait for the close below
        if gpu_available():
            from ..gpu.runtime import setup

            setup.configure()

    def teardown(self, worker: Worker) -> None:
        if not self._closing:  # removed from a healthy worker: nothing will restart its process
            containment.heal_on_fault(False)

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        # Called on the worker's event loop inside its handling of the task's failure, before that
        # handling puts the task-erred message into the worker's batched stream to the scheduler
        # (BaseWorker.handle_stimulus); the close, a callback after it, sends its close-stream message
        # into the same stream, so the scheduler records the task as erred before it removes the worker.
        if finish == "error" and containment.poisoned() and not self._closing and self._worker is not None:
            self._closing = True
            self._worker.loop.add_callback(self._close_poisoned, self._worker)

    async def _close_poisoned(self, worker: Worker) -> None:
        """Close ``worker`` as its nanny's stop and distributed's own fail-hard close do (the nanny is not
        told to close, so it restarts the process), not waiting for its task threads: a task still
        waiting for the restart ends with the process."""
        logger.error(
            "closing worker %s after a sticky CUDA fault (%s); %s",
            worker.address,
            containment.first_fault(),
            "its nanny starts a fresh process" if worker.nanny else "it has no nanny and is not restarted",
        )
        if worker.nanny:  # the nanny restarts the worker only once this process has ended
            threading.Thread(target=_exit_after, args=(CLOSE_TIMEOUT + EXIT_GRACE,), daemon=True).start()
        try:
            await asyncio.wait_for(
                worker.close(nanny=False, executor_wait=False, reason="zarr-dask-gpu-sticky-cuda-fault"),
                CLOSE_TIMEOUT,
            )
        except Exception:
            if not worker.nanny:  # the process may be the user's own (an in-process worker): never exit it
                raise
            logger.critical("worker %s did not close after a sticky CUDA fault: exiting the process", worker)
            os._exit(1)  # the nanny starts a fresh process


def _exit_after(seconds: float) -> None:
    """A poisoned process that is still alive ``seconds`` after its worker began to close exits now."""
    time.sleep(seconds)
    logger.critical("the process of a worker closed after a sticky CUDA fault has not exited: exiting now")
    os._exit(1)
