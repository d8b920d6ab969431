"""The joiner that joins concurrent tasks' nvCOMP calls, on real threads with a plain ``run``."""

import random
import threading
import time

import pytest

from zarr_dask_gpu.joining import Joiner


class Recorder:
    """A ``run`` that records each call's key and items and gives back ``(key, item * 2)``."""

    def __init__(self, fail_on=None):
        self.calls = []
        self.fail_on = fail_on
        self.lock = threading.Lock()

    def __call__(self, key, items):
        with self.lock:
            self.calls.append((key, list(items)))
        if self.fail_on is not None and self.fail_on in items:
            raise ValueError(f"item {self.fail_on} is bad")
        time.sleep(0.01)  # a call takes a while, as a decode does
        return [(key, i * 2) for i in items]


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


def as_members(c, n, body):
    """Run ``body(k)`` on ``n`` threads, each inside ``c.member()`` once all have entered it."""
    entered = threading.Barrier(n)

    def task(k):
        with c.member():
            entered.wait()
            return body(k)

    return run_threads(task, n)


def test_items_of_members_on_their_way_go_in_one_call():
    run = Recorder()
    c = Joiner(run)

    def body(k):
        time.sleep(random.uniform(0, 0.05))  # reads of different lengths
        return c.submit("zstd", k)

    assert as_members(c, 8, body) == [("zstd", 2 * k) for k in range(8)]
    assert len(run.calls) == 1
    assert sorted(run.calls[0][1]) == list(range(8))


def test_a_member_that_leaves_without_submitting_releases_the_others():
    run = Recorder()
    c = Joiner(run)

    def body(k):
        if k == 0:
            return c.submit("zstd", 5)
        time.sleep(0.2)  # a task with nothing to decode (all chunks missing, or decoded on the host)
        return None

    t0 = time.perf_counter()
    assert as_members(c, 2, body) == [("zstd", 10), None]
    assert time.perf_counter() - t0 >= 0.2  # the call waited for the other member to leave
    assert run.calls == [("zstd", [5])]


def test_a_member_decoding_aside_does_not_hold_the_others_call():
    run = Recorder()
    c = Joiner(run)
    joined = threading.Event()

    def body(k):
        if k == 0:  # huge chunks: its own call, while the others join theirs without it
            with c.aside():
                assert joined.wait(5), "the others' call waited for the member aside"
            return "alone"
        got = c.submit("zstd", k)
        joined.set()
        return got

    assert as_members(c, 3, body) == ["alone", ("zstd", 2), ("zstd", 4)]
    assert [sorted(items) for _, items in run.calls] == [[1, 2]]


def test_a_call_starts_once_most_items_are_pending_while_other_members_read():
    run = Recorder()
    c = Joiner(run)
    first_two = threading.Event()

    def body(k):
        if k >= 2:  # still reading until the first two members' call has run
            assert first_two.wait(5)
        got = c.submit("zstd", k, most=2)
        if k < 2:
            first_two.set()
        return got

    assert as_members(c, 6, body) == [("zstd", 2 * k) for k in range(6)]
    calls = [sorted(items) for _, items in run.calls]
    assert calls[0] == [0, 1] and sorted(i for call in calls[1:] for i in call) == [2, 3, 4, 5]
    assert all(len(call) <= 2 for call in calls)


def test_patience_bounds_the_wait_for_a_member_still_reading():
    run = Recorder()
    c = Joiner(run)
    first_done = threading.Event()

    def body(k):
        if k == 1:  # reads for longer than the first task's patience
            assert first_done.wait(5)
            return c.submit("zstd", k, most=2, patience=0.05)
        got = c.submit("zstd", k, most=2, patience=0.05)
        first_done.set()
        return got

    t0 = time.perf_counter()
    assert as_members(c, 2, body) == [("zstd", 0), ("zstd", 2)]
    assert time.perf_counter() - t0 < 2
    assert [items for _, items in run.calls] == [[0], [1]]  # two calls: the first did not wait on


def test_members_arriving_within_patience_still_join():
    run = Recorder()
    c = Joiner(run)

    def body(k):
        time.sleep(0.02 * k)  # partners a little apart, as warm reads are
        return c.submit("zstd", k, most=2, patience=1.0)

    assert as_members(c, 2, body) == [("zstd", 0), ("zstd", 2)]
    assert [sorted(items) for _, items in run.calls] == [[0, 1]]


def test_one_call_per_key():
    run = Recorder()
    c = Joiner(run)
    got = as_members(c, 6, lambda k: c.submit("lz4" if k % 2 else "zstd", k))
    assert got == [("lz4" if k % 2 else "zstd", 2 * k) for k in range(6)]
    assert sorted((key, sorted(items)) for key, items in run.calls) == [
        ("lz4", [1, 3, 5]),
        ("zstd", [0, 2, 4]),
    ]


def test_a_failed_call_raises_in_every_submitter_of_it_and_the_next_call_runs():
    run = Recorder(fail_on=3)
    c = Joiner(run)
    out = as_members(c, 4, lambda k: c.submit("zstd", k))  # raises in all four: item 3 is in the call
    assert all(isinstance(e, ValueError) and "item 3" in str(e) for e in out)
    with c.member():  # the joiner is usable after a failed call
        assert c.submit("zstd", 1) == ("zstd", 2)


def test_a_single_task_outside_others_runs_at_once():
    run = Recorder()
    c = Joiner(run)
    with c.member():
        assert c.submit("zstd", 4) == ("zstd", 8)
        assert c.submit("zstd", 5) == ("zstd", 10)  # a second submit of the same task
    assert [items for _, items in run.calls] == [[4], [5]]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("most", [0, 1, 3])
@pytest.mark.parametrize("patience", [None, 0.005])
def test_random_tasks_all_get_their_own_results(seed, most, patience):
    rng = random.Random(seed)
    plans = [[(rng.choice("ab"), rng.randrange(1000)) for _ in range(rng.randrange(4))] for _ in range(16)]
    delays = [[rng.uniform(0, 0.02) for _ in p] for p in plans]
    run = Recorder()
    c = Joiner(run)

    def task(k):
        got = []
        with c.member():
            for (key, item), d in zip(plans[k], delays[k], strict=True):
                time.sleep(d)
                got.append(c.submit(key, item, most, patience))
        return got

    assert run_threads(task, 16) == [[(key, 2 * item) for key, item in p] for p in plans]
    submitted = sorted(x for p in plans for x in p)
    assert sorted((key, i) for key, items in run.calls for i in items) == submitted
    assert not most or max(len(items) for _, items in run.calls) <= most
