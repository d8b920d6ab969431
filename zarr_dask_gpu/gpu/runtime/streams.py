"""The GPU backend's CUDA streams: one per task thread and device, and a few idle ones per device
for joined decode calls, at a lower priority than the tasks'. Kept in registries, not thread-locals,
so that they are released at exit while CUDA is still up."""

import atexit
import contextlib
import threading
from collections.abc import Iterator

import cupy as cp

from ...distributed import containment

# A task's own kernels (its headers' gathers, blosc's block-table walk, the structure checks) come
# between waits of its thread; a joined decode call's kernels are grids that fill the GPU. On a
# stream of higher priority the block scheduler starts a task's kernels ahead of the blocks of a call
# not yet started, so that a task reaches its call while another call runs (its unshuffle and block
# copies go ahead too, as does all of it ahead of other work at the default priority). CUDA clamps a
# priority to the device's range (lower numbers first): these are its greatest and its least.
TASK_PRIORITY, JOINED_PRIORITY = -100, 0
_lock = threading.Lock()
_tasks: dict[tuple[int, int], cp.cuda.Stream] = {}  # per (thread, device)
_joining: dict[int, list[cp.cuda.Stream]] = {}  # per device: idle streams for joined calls


def task_stream() -> cp.cuda.Stream:
    """This thread's stream on the current device (a stream belongs to one device)."""
    key = (threading.get_ident(), cp.cuda.Device().id)
    with _lock:
        if key not in _tasks:
            _tasks[key] = cp.cuda.Stream(non_blocking=True, priority=TASK_PRIORITY)
        return _tasks[key]


@contextlib.contextmanager
def joining_stream() -> Iterator[cp.cuda.Stream]:
    """An idle stream of the current device's few for a joined call. cupy's pool keeps freed memory
    per stream, so nvCOMP's scratch for many tasks, made on whichever task's stream led, would be
    kept once per task thread."""
    dev = cp.cuda.Device().id
    with _lock:
        idle = _joining.setdefault(dev, [])
        stream = idle.pop() if idle else cp.cuda.Stream(non_blocking=True, priority=JOINED_PRIORITY)
    try:
        yield stream
    finally:
        with _lock:
            _joining[dev].append(stream)


@atexit.register
def _release() -> None:
    with _lock:
        if not containment.poisoned():  # a context lost to a sticky fault has nothing left to run
            for dev in {d for _, d in _tasks}:  # every device used
                cp.cuda.Device(dev).synchronize()
        _tasks.clear()
        _joining.clear()
