"""Read slots: at most ``read-slots`` tasks of a process read at once (0: no limit). Fewer tasks
reading at once finish their reads sooner and decode while the others read, rather than all
reading, then all decoding (docs/decisions/task-overlap.md)."""

import contextlib
import threading

from ... import config

_lock = threading.Lock()
_slots: dict[int, threading.BoundedSemaphore] = {}


def read_slot() -> contextlib.AbstractContextManager:
    """One of ``read-slots`` places for a task's reads, held while it reads."""
    n = config.integer("read-slots")
    if n <= 0:
        return contextlib.nullcontext()
    with _lock:
        return _slots.setdefault(n, threading.BoundedSemaphore(n))
