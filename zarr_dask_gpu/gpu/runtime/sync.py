"""Waiting for a CUDA stream from a task's thread."""

import cupy as cp


def wait(stream: cp.cuda.Stream) -> None:
    """Wait for ``stream`` on a blocking-sync event: the thread sleeps without the GIL (cupy's
    eventSynchronize releases it) and neither spins on a core (``stream.synchronize()`` does, by
    CUDA's default) nor wakes to poll, so the other threads' reads and launches go on (a poll loop
    cost them the GIL: docs/decisions/device-waits.md)."""
    done = cp.cuda.Event(block=True, disable_timing=True)
    done.record(stream)
    done.synchronize()
