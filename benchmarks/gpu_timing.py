"""The probes' timing of a GPU step: the median wall time of several runs after a warm-up run (kernel
compiles, pools), the device idle before and after each, so that no earlier work is counted in and
no launched work is left out."""

import statistics
import time
from collections.abc import Callable
from typing import Any

import cupy as cp


def median_seconds(fn: Callable[..., Any], *args: Any, repeat: int = 5) -> float:
    """The median seconds of ``repeat`` calls of ``fn(*args)``."""
    fn(*args)
    times = []
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        fn(*args)
        cp.cuda.Device().synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
