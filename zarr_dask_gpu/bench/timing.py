"""One set of timing helpers for the bench and the scripts in ``benchmarks/``: timed passes, passes
in turns, the page cache warmed or dropped, and the GPU's passes (persist, device idle, pool emptied).
cupy is imported only by the helpers that use the device."""

import ast
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def timed(
    fn: Callable[[], Any],
    repeat: int,
    before: Callable[[], Any] | None = None,
    *,
    warmup: int = 0,
    pick: Callable[[Sequence[float]], float] = statistics.median,
) -> float:
    """The median (or ``pick``) seconds of ``repeat`` calls of ``fn``, each after an untimed
    ``before()``, following ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return pick(times)


def in_turns(
    fns: dict[str, Callable[[], Any]], repeat: int, before: Callable[[], Any], *, alternate: bool = False
) -> dict[str, list[float]]:
    """The seconds of each of ``fns`` in each of ``repeat`` rounds, each round calling every one in
    turn after an untimed ``before()``; with ``alternate`` every other round runs them in the reverse
    order, so that a place in the round (after which one's pass) weighs on all alike."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeat):
        for name in names[::-1] if alternate and r % 2 else names:
            times[name].append(timed(fns[name], 1, before))
    return times


def interleaved(
    fns: dict[str, Callable[[], Any]], repeat: int, before: Callable[[], Any]
) -> dict[str, float]:
    """The median seconds of each of ``fns`` over ``repeat`` rounds of ``in_turns``: a storage whose
    speed drifts over the run (cold reads) then drifts under all of them alike."""
    return {name: statistics.median(t) for name, t in in_turns(fns, repeat, before).items()}


def setting_value(text: str) -> Any:
    """A setting's value written as text, read as dask reads one from the environment: a Python
    literal (``0``, ``None``, ``True``), else the text itself (``256MiB``)."""
    try:
        return ast.literal_eval(text)
    except (SyntaxError, ValueError):
        return text


def parse_settings(text: str) -> dict[str, Any]:
    """``"read-slots=0,join-wait=None"`` as ``settings`` takes it, each value by ``setting_value``."""
    pairs = (kv.split("=", 1) for kv in text.split(",") if kv)
    return {k: setting_value(v) for k, v in pairs}


def settings(values: Mapping[str, Any]) -> Any:
    """The package's settings ``values`` (keys as in its docs, without ``zarr_dask_gpu.``), for a
    ``with`` block around passes (and the graphs they run, for settings read as a graph is made)."""
    import dask

    return dask.config.set({f"zarr_dask_gpu.{k}": v for k, v in values.items()})


def warm_cache(files: Sequence[str]) -> None:
    """Bring the files into the page cache, written to disk first: a dataset this run just wrote
    would otherwise be written back while the warm rows are timed, by the kernel's flusher threads."""
    for f in files:
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
            while fh.read(64 << 20):
                pass


def drop_cache(files: Sequence[str]) -> None:
    """Evict the files' pages from the page cache (no root needed; written first, as only clean
    pages are evicted: a dataset the same run wrote may not be on disk yet)."""
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def sync_device() -> None:
    """Wait until the current device is idle."""
    import cupy as cp

    cp.cuda.Device().synchronize()


def free_device() -> None:
    """The device idle, then cupy's pool emptied: the next pass allocates all it uses."""
    import cupy as cp

    cp.cuda.Device().synchronize()
    cp.get_default_memory_pool().free_all_blocks()


def task_result(block: Any) -> Any:
    """The one block of the dask array ``block`` as its task returns it, run on this thread:
    ``compute`` would copy it once more, joining its blocks (one block too)."""
    import dask

    key = block.__dask_keys__()
    while isinstance(key, list):
        (key,) = key  # one block
    return dask.get(block.__dask_graph__(), key)


def emptying(seconds: list[float]) -> Callable[[], None]:
    """``free_device`` as a pass's untimed ``before``, each call's seconds appended to ``seconds``:
    what releasing a pass's memory costs is reported beside the pass, not inside it."""

    def empty() -> None:
        t0 = time.perf_counter()
        free_device()
        seconds.append(time.perf_counter() - t0)

    return empty


def persisting(arr: Any, threads: int) -> Callable[[], None]:
    """A body to time: ``arr`` persisted on ``threads`` threads, waited for and dropped (its memory
    back in cupy's pool, which the caller empties or keeps between passes)."""

    def run() -> None:
        y = arr.persist(scheduler="threads", num_workers=threads)
        sync_device()
        del y

    return run


def traced_pass(body: Callable[[], None]) -> tuple[float, list[int], int]:
    """One ``body()`` (a GPU pass) timed with its tasks' phases collected: its ms, its first four
    reads' ms, and how many ms into it its first decode call started."""
    from .. import phases  # pure Python, as task.py reports to it

    with phases.collect() as spans:
        t0 = time.perf_counter()
        body()
        dt = time.perf_counter() - t0
    reads = sorted((s for s in spans if s.name == "read"), key=lambda s: s.start)
    calls = sorted((s for s in spans if s.name == "decode-call"), key=lambda s: s.start)
    first_call = round((calls[0].start - t0) * 1e3) if calls else -1
    return dt * 1e3, [round(s.seconds * 1e3) for s in reads[:4]], first_call
