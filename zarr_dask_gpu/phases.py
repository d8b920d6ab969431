"""The phases of a read task, reported to whoever listens: benchmarks time them without patching the
backend.

The GPU backend (``gpu/backend.py``, ``gpu/runtime/faults.py``) and the task (``task.py``) hold ``record``
around each phase; when the phase ends, every listener is called with its ``Span``. While nothing
listens (the default), ``record`` returns a shared no-op context manager: a function call and a
global read a phase. Pure Python, so that the CPU path (``task.py``) imports it without cupy.

    from zarr_dask_gpu import phases

    with phases.collect() as spans:
        x.persist()
    reads = [s.seconds for s in spans if s.name == "read"]

Spans nest: a GPU task's ``plan`` comes first, then its ``task``, which holds its ``locate``, ``read``,
``check``, ``decode``, ``assemble`` and ``wait`` spans (blosc's frames a ``frames`` span, their inner
streams their own ``check`` and ``decode``; a CPU task reports ``plan`` and ``assemble`` only); a
``decode-call`` runs inside the ``decode`` of the task whose thread led it, for that task and the
others it joined. Listeners are called on the tasks' threads, from many at once: they must be quick
and thread-safe (``list.append`` is), and an exception of one propagates into the task.
"""

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Phase(StrEnum):
    """A phase of a read task; its value is the ``Span``'s name (``NAMES`` says what each covers)."""

    PLAN = "plan"
    TASK = "task"
    LOCATE = "locate"
    READ = "read"
    CHECK = "check"
    FRAMES = "frames"
    DECODE = "decode"
    DECODE_CALL = "decode-call"
    ASSEMBLE = "assemble"
    WAIT = "wait"


NAMES: dict[Phase, str] = {
    Phase.PLAN: "a task's chunks: which overlap its block, and the part of each it takes (task.py)",
    Phase.TASK: "a task's device work, from its stream's set-up to the end of its wait (GPU)",
    Phase.LOCATE: "where its chunks are stored: a stat per chunk file, or the shard indexes read",
    Phase.READ: "its chunks' bytes into the staging buffer (kvikio or host preads; remote reads)",
    Phase.CHECK: "the structure check of the chunks bound for nvCOMP (a kernel and a read-back)",
    Phase.FRAMES: "blosc frames' headers checked and block tables walked into inner streams (kernels "
    "and read-backs)",
    Phase.DECODE: "a task's decode of one compression: its calls (joined or not) and their waits",
    Phase.DECODE_CALL: "one decode of one or more tasks' batches joined (nvCOMP or the package's kernels)",
    Phase.ASSEMBLE: "the decoded chunks copied into the block, missing ones filled (task.py; on the GPU "
    "the copies' launches: they run before the task's wait ends)",
    Phase.WAIT: "the wait for the task's stream at its end (GPU)",
}


@dataclass(frozen=True)
class Span:
    """One phase as it ended: ``name`` (a ``Phase``), its ``time.perf_counter()`` bounds, the
    thread that ran it, whether it returned (``ok``: False when it raised) and what it covered
    (``detail``: ``chunks``, and ``tasks`` for a ``decode-call``)."""

    name: Phase
    start: float
    end: float
    thread: int
    ok: bool = True
    detail: Mapping[str, int] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.end - self.start


Listener = Callable[[Span], None]
_listeners: tuple[Listener, ...] = ()  # replaced whole under the lock, read without it
_lock = threading.Lock()
_IDLE = contextlib.nullcontext()


class _Recording:
    """A phase being timed for the listeners there were when it started."""

    __slots__ = ("detail", "listeners", "name", "start")

    def __init__(self, name: Phase, detail: dict[str, int], listeners: tuple[Listener, ...]) -> None:
        self.name, self.detail, self.listeners = name, detail, listeners

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        span = Span(
            self.name, self.start, time.perf_counter(), threading.get_ident(), kind is None, self.detail
        )
        for listener in self.listeners:
            listener(span)


def record(name: Phase, **detail: int) -> contextlib.AbstractContextManager[None]:
    """Held around a phase ``name``; ``detail`` says what it covers. A no-op
    while nothing listens."""
    listeners = _listeners
    if not listeners:
        return _IDLE
    return _Recording(name, detail, listeners)


def active() -> bool:
    """Whether anything listens (a caller may skip the work of a costly ``detail`` when not)."""
    return bool(_listeners)


def add_listener(listener: Listener) -> None:
    """Call ``listener`` with every phase that starts from now on, until ``remove_listener``."""
    global _listeners
    with _lock:
        _listeners = (*_listeners, listener)


def remove_listener(listener: Listener) -> None:
    """Stop calling ``listener`` (once for each time it was added); phases already started still
    report to it."""
    global _listeners
    with _lock:
        rest = list(_listeners)
        rest.remove(listener)
        _listeners = tuple(rest)


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """``listener`` called with every phase that starts inside."""
    add_listener(listener)
    try:
        yield
    finally:
        remove_listener(listener)


@contextlib.contextmanager
def collect() -> Iterator[list[Span]]:
    """A list that fills with the spans of the phases that start inside, in the order they end."""
    spans: list[Span] = []
    with listening(spans.append):
        yield spans
