"""The decode batcher's merging, ordering and error handling, with host stand-ins for CUDA streams
(the batcher needs only record/wait_event/enter; nvCOMP itself is exercised by the gpu tests)."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from zarr_dask_gpu.gpu.batcher import Batcher, Job


class HostStream:
    """Records what the batcher asks of a stream: events waited for, and the events it records."""

    def __init__(self, name):
        self.name, self.log, self.count = name, [], 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def record(self):
        self.count += 1
        return f"{self.name}:event{self.count}"

    def wait_event(self, event):
        self.log.append(("wait", event))


def _job(compression, tag):
    return Job(compression, tag, None, [1], None, None, [1], ready=f"ready:{tag}")


def test_jobs_waiting_together_are_merged_per_compression():
    first_in, release, launches = threading.Event(), threading.Event(), []

    def launch(compression, stream, jobs):
        launches.append((compression, stream.name, [j.src for j in jobs]))
        if not first_in.is_set():  # hold the dispatcher so that the others queue up behind it
            first_in.set()
            release.wait(5)

    streams = [HostStream("s0"), HostStream("s1")]
    batcher = Batcher(launch, streams)
    tasks = [HostStream(f"t{i}") for i in range(7)]
    with ThreadPoolExecutor(7) as ex:
        futures = [ex.submit(batcher.decode, _job("zstd", "first"), tasks[0])]
        assert first_in.wait(5)
        for i, comp in enumerate(["zstd", "lz4", "zstd", "zstd", "lz4", "zstd"], start=1):
            futures.append(ex.submit(batcher.decode, _job(comp, f"job{i}"), tasks[i]))
        deadline = time.monotonic() + 5
        while len(batcher._queue) < 6 and time.monotonic() < deadline:  # all six queue up behind it
            time.sleep(0.01)
        release.set()
        for f in futures:
            f.result(5)
    assert launches[0] == ("zstd", "s0", ["first"])
    assert launches[1:] == [("zstd", "s1", ["job1", "job3", "job4", "job6"]), ("lz4", "s0", ["job2", "job5"])]
    # the dispatcher's stream waited for each task's inputs; each task's stream for its decode
    assert streams[1].log == [("wait", f"ready:job{i}") for i in (1, 3, 4, 6)]
    assert tasks[3].log == [("wait", "s1:event1")] and tasks[2].log == [("wait", "s0:event2")]


def test_a_failed_launch_raises_in_every_task_of_it_and_the_dispatcher_lives_on():
    def launch(compression, stream, jobs):
        if compression == "bad":
            raise RuntimeError("nvCOMP said no")

    batcher = Batcher(launch, [HostStream("s0")])
    with pytest.raises(RuntimeError, match="nvCOMP said no"):
        batcher.decode(_job("bad", "a"), HostStream("t"))
    task = HostStream("t")
    batcher.decode(_job("zstd", "b"), task)
    assert task.log == [("wait", "s0:event1")]
