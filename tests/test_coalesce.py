"""The coalescer that joins concurrent tasks' nvCOMP calls, on real threads with a plain ``run``."""

import random
import threading
import time

import pytest

from zarr_dask_gpu.coalesce import Coalescer


class Recorder:
    """A ``run`` that records each call's key and items and gives back ``(key, item * 2)``."""

    def __init__(self, fail_on=None, seconds=0.01):
        self.calls = []
        self.fail_on = fail_on
        self.seconds = seconds
        self.lock = threading.Lock()
        self.running = self.most_running = 0

    def __call__(self, key, items):
        with self.lock:
            self.calls.append((key, list(items)))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if self.fail_on is not None and self.fail_on in items:
                raise ValueError(f"item {self.fail_on} is bad")
            time.sleep(self.seconds)  # a call takes a while, as a decode does
            return [(key, i * 2) for i in items]
        finally:
            with self.lock:
                self.running -= 1


def run_threads(target, n, timeout=30):
    """Run ``target(k)`` on ``n`` threads; their outcomes (a result, or the exception raised)."""
    out = [None] * n

    def body(k):
        try:
            out[k] = target(k)
        except Exception as e:
            out[k] = e

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a submitter hung"
    return out


def test_items_of_members_on_their_way_go_in_one_call():
    run = Recorder()
    c = Coalescer(run)
    entered = threading.Barrier(8)

    def task(k):
        with c.member():
            entered.wait()
            time.sleep(random.uniform(0, 0.05))  # reads of different lengths
            return c.submit("zstd", k)

    assert run_threads(task, 8) == [("zstd", 2 * k) for k in range(8)]
    assert len(run.calls) == 1
    assert sorted(run.calls[0][1]) == list(range(8))


def test_a_member_that_leaves_without_submitting_releases_the_others():
    run = Recorder()
    c = Coalescer(run)
    entered = threading.Barrier(2)

    def task(k):
        with c.member():
            entered.wait()
            if k == 0:
                return c.submit("zstd", 5)
            time.sleep(0.2)  # a task with nothing to decode (all chunks missing, or decoded on the host)
            return None

    t0 = time.perf_counter()
    assert run_threads(task, 2) == [("zstd", 10), None]
    assert time.perf_counter() - t0 >= 0.2  # the call waited for the other member to leave
    assert run.calls == [("zstd", [5])]


def test_one_call_per_key():
    run = Recorder()
    c = Coalescer(run)
    entered = threading.Barrier(6)

    def task(k):
        with c.member():
            entered.wait()
            return c.submit("lz4" if k % 2 else "zstd", k)

    assert run_threads(task, 6) == [("lz4" if k % 2 else "zstd", 2 * k) for k in range(6)]
    assert sorted((key, sorted(items)) for key, items in run.calls) == [
        ("lz4", [1, 3, 5]),
        ("zstd", [0, 2, 4]),
    ]


def test_a_failed_call_raises_in_every_submitter_of_it_and_the_next_call_runs():
    run = Recorder(fail_on=3)
    c = Coalescer(run)
    entered = threading.Barrier(4)

    def task(k):
        with c.member():
            entered.wait()
            return c.submit("zstd", k)  # raises in all four: item 3 is in the call

    out = run_threads(task, 4)
    assert all(isinstance(e, ValueError) and "item 3" in str(e) for e in out)
    with c.member():  # the coalescer is usable after a failed call
        assert c.submit("zstd", 1) == ("zstd", 2)


def test_a_single_task_outside_others_runs_at_once():
    run = Recorder()
    c = Coalescer(run)
    with c.member():
        assert c.submit("zstd", 4) == ("zstd", 8)
        assert c.submit("zstd", 5) == ("zstd", 10)  # a second submit of the same task
    assert [items for _, items in run.calls] == [[4], [5]]


def test_items_submitted_while_calls_run_go_together_in_the_next():
    run = Recorder(seconds=0.2)
    c = Coalescer(run, at_once=lambda: 1)

    def task(k):
        time.sleep(0.05 * (k > 0))  # the first starts alone; the others come while its call runs
        with c.member():
            return c.submit("read", k)

    assert run_threads(task, 4) == [("read", 2 * k) for k in range(4)]
    assert [sorted(items) for _, items in run.calls] == [[0], [1, 2, 3]]


@pytest.mark.parametrize("at_once", [0, 1, 2])
@pytest.mark.parametrize("seed", range(5))
def test_random_tasks_all_get_their_own_results(seed, at_once):
    rng = random.Random(seed)
    plans = [[(rng.choice("ab"), rng.randrange(1000)) for _ in range(rng.randrange(4))] for _ in range(16)]
    delays = [[rng.uniform(0, 0.02) for _ in p] for p in plans]
    run = Recorder()
    c = Coalescer(run, at_once=lambda: at_once)

    def task(k):
        got = []
        with c.member():
            for (key, item), d in zip(plans[k], delays[k], strict=True):
                time.sleep(d)
                got.append(c.submit(key, item))
        return got

    assert run_threads(task, 16) == [[(key, 2 * item) for key, item in p] for p in plans]
    submitted = sorted(x for p in plans for x in p)
    assert sorted((key, i) for key, items in run.calls for i in items) == submitted
    assert run.most_running <= (at_once or 16)
