"""Joining the work that a process's concurrent tasks submit into fewer, larger calls."""

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Sequence

import numpy as np


class _Entry[T, R]:
    """One submitted item, and what its call gave back for it."""

    def __init__(self, item: T) -> None:
        self.item = item
        self.taken = False  # a thread has taken it into a call
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class Joiner[T, R]:
    """Runs the items that tasks submit while other tasks are still on their way in one call per key.

    A task enters ``member`` before the work that leads to its submissions (its reads) and leaves it
    after its last one. A submitted item waits until no member is on its way, that is, every member
    waits in ``submit`` or has left, until ``most`` items of its key are pending, or for at most
    ``patience`` seconds; then one of the waiting threads runs all pending items of its key in one
    call of ``run(key, items)`` (which returns one result per item), and each submitter gets its own
    result, or the call's exception. A thread counts as on its way again once its ``submit``
    returns, so a task may submit several times.

    nvCOMP decodes a chunk per thread block: a call with a wave's worth of chunks takes about as long
    as a call of one task's, and one call of many tasks' chunks ends sooner than as many concurrent
    calls (docs/decisions/task-overlap.md).
    """

    def __init__(self, run: Callable[[Hashable, Sequence[T]], Sequence[R]]) -> None:
        self._run = run
        self._cv = threading.Condition()
        self._on_way = 0  # members neither waiting in submit nor gone
        self._pending: dict[Hashable, list[_Entry[T, R]]] = {}

    @contextlib.contextmanager
    def member(self) -> Iterator[None]:
        """The scope of a task whose items the others' calls should wait for; ``submit`` inside it."""
        with self._cv:
            self._on_way += 1
        try:
            yield
        finally:
            with self._cv:
                self._on_way -= 1
                self._cv.notify_all()

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Inside ``member``: work of this member that joins no call, during which the others'
        submitted items do not wait for it."""
        with self._cv:
            self._on_way -= 1
            self._cv.notify_all()
        try:
            yield
        finally:
            with self._cv:
                self._on_way += 1

    def submit(self, key: Hashable, item: T, most: int = 0, patience: float | None = None) -> R:
        """``item``'s result from a call of ``run`` with every item of ``key`` pending when no member is
        on its way, once ``most`` are pending (0: no such bound), or once ``item`` has waited
        ``patience`` seconds (None: no such bound); called inside ``member``.

        A bound lets a call start while later members still read: a worker streaming many tasks
        then decodes some while others read, rather than all reading, then all decoding. Patience
        bounds what a task loses to a partner whose reads take longer (a cold disk's): joining its
        partner's call late ends later than two calls would."""
        entry: _Entry[T, R] = _Entry(item)
        deadline = None if patience is None else time.monotonic() + patience
        with self._cv:
            pending = self._pending.setdefault(key, [])
            pending.append(entry)
            self._on_way -= 1
            self._cv.notify_all()
            while not entry.taken and self._on_way > 0 and not 0 < most <= len(pending):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._cv.wait(left)
            batch = None if entry.taken else self._pending.pop(key)
            for e in batch or ():
                e.taken = True
        try:
            if batch is not None:
                self._lead(key, batch)
            with self._cv:
                while not entry.done:
                    self._cv.wait()
        finally:
            with self._cv:
                self._on_way += 1
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]

    def _lead(self, key: Hashable, batch: list[_Entry[T, R]]) -> None:
        """Run ``batch`` in one call, outside the lock, and hand each entry its result."""
        results: list[R | None]
        failed: BaseException | None = None
        try:
            results = list(self._run(key, [e.item for e in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"a joined call gave {len(results)} results for {len(batch)} items")
        except BaseException as err:  # every submitter of the call raises it
            results, failed = [None] * len(batch), err
        with self._cv:
            for e, r in zip(batch, results, strict=True):
                e.result, e.error, e.done = r, failed, True
            self._cv.notify_all()


def joins(out_sizes: np.ndarray, below: int | None, fewer: int | None = None) -> bool:
    """Whether a task's decode batch joins other tasks' calls: its items average fewer than ``below``
    decoded bytes (``join-below``; None: any size) and number fewer than ``fewer``
    (``join-items``; None: any count). Few huge frames, or as many small ones as the device
    runs at once, fill it alone, and a joined call would wait for its partner's reads."""
    if len(out_sizes) == 0:
        return True
    small = below is None or float(np.mean(out_sizes)) < below
    return small and (fewer is None or len(out_sizes) < fewer)
