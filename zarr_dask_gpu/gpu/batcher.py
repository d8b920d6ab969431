"""One nvCOMP call for the chunks of every task that is decoding at the same moment.

nvCOMP decodes one chunk per CUDA thread block, so a call's time hardly grows with its chunk count
(32 chunks of 8 MiB take as long as 512: docs/performance.md). Tasks hand their sized batches to one
dispatcher thread per process, which merges whatever is waiting into one call on the next of a few
streams, so calls overlap too. No task thread calls nvCOMP's sized decode itself, and no host sync
is involved: the dispatcher's stream waits for the task's stream (its reads and checks) with an
event, and the task's stream waits for the decode the same way.

The module needs no GPU library: streams are anything with cupy's ``record()``, ``wait_event()``
and context-manager protocol, so the merging logic is tested on the CPU too.
"""

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol


class Stream(Protocol):
    """The part of ``cupy.cuda.Stream`` the batcher uses."""

    def __enter__(self) -> Any:
        """Make the stream current."""
        ...

    def __exit__(self, *exc: object) -> Any: ...

    def record(self) -> Any:
        """An event marking the work queued on the stream so far."""
        ...

    def wait_event(self, event: Any) -> None:
        """Make later work on the stream wait for ``event``."""
        ...


# issues the nvCOMP call of a merged batch: (compression, stream, jobs) -> None
Launch = Callable[[str, Any, list["Job"]], None]


@dataclass
class Job:
    """A task's batch of one compression: payloads in ``src`` at ``offsets``/``sizes``, decoded into
    ``out`` at ``out_offsets``, each exactly ``out_sizes`` bytes (checked beforehand)."""

    compression: str
    src: Any
    offsets: Any
    sizes: Any
    out: Any
    out_offsets: Any
    out_sizes: Any
    ready: Any  # an event recorded on the task's stream once the inputs are in place
    launched: threading.Event = field(default_factory=threading.Event)
    finished: Any = None
    error: BaseException | None = None
    keep: object = None  # nvCOMP's objects of the merged call, held by the task until it has run


class Batcher:
    """Merges concurrent tasks' decode batches; ``launch`` issues one merged batch on a stream."""

    def __init__(self, launch: Launch, streams: list[Stream]) -> None:
        self._launch = launch
        self._streams = streams
        self._next = 0
        self._queue: list[Job] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._run, name="zarr-dask-gpu-decode", daemon=True).start()

    def decode(self, job: Job, stream: Stream) -> None:
        """Queue ``job`` and make the task's ``stream`` wait for its decode.

        Returns once the decode is launched; the buffers must stay alive until the task's stream
        passes that point, which holds for memory freed to cupy's pool on the task's stream.
        """
        with self._cond:
            self._queue.append(job)
            self._cond.notify()
        job.launched.wait()
        if job.error is not None:
            raise job.error
        stream.wait_event(job.finished)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._cond.wait()
                jobs, self._queue = self._queue, []
            for compression in dict.fromkeys(j.compression for j in jobs):
                group = [j for j in jobs if j.compression == compression]
                stream = self._streams[self._next]
                self._next = (self._next + 1) % len(self._streams)
                try:
                    with stream:
                        for j in group:
                            stream.wait_event(j.ready)
                        self._launch(compression, stream, group)
                        done = stream.record()
                    for j in group:
                        j.finished = done
                except BaseException as e:  # the tasks raise it; the dispatcher lives on
                    for j in group:
                        j.error = e
                for j in group:
                    j.launched.set()
