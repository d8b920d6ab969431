"""A-large's passes (16 threads, ``from_zarr_gpu(path).persist()``) in turns under cupy's allocators,
every other round reversed, each pass from an emptied pool but the last: cupy's pool (``base``, the
bench's first row), the same pool with allocations of 32 MiB or more made one at a time by a lock
around it (``locked``), cudaMallocAsync (``async``: cupy's ``MemoryAsyncPool``, trimmed before each
pass; ``async-locked``), and cupy's pool kept from a pass just before (``kept``). Prints each
variant's median pass, the median release before it (untimed), and per pass its ms, its first four
reads' ms and when its first decode call started.
Run on the GPU host after ``python3 -m zarr_dask_gpu.bench.datasets A-large``:
    python3 benchmarks/allocators.py /tmp/bench-a.zarr-large ROUNDS
"""

import statistics
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import cupy as cp

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.bench.timing import free_device, persisting, sync_device, traced_pass

pool = cp.get_default_memory_pool()
apool = cp.cuda.MemoryAsyncPool()
lock = threading.Lock()
BIG = 32 << 20


def one_at_a_time(malloc: Callable[[int], Any]) -> Callable[[int], Any]:
    """``malloc`` with its allocations of ``BIG`` bytes or more made under one lock."""

    def alloc(size: int) -> Any:
        if size < BIG:
            return malloc(size)
        with lock:
            return malloc(size)

    return alloc


def use(alloc: Callable[[int], Any]) -> None:
    sync_device()
    cp.cuda.set_allocator(alloc)


def empty_async() -> None:
    sync_device()
    pool.free_all_blocks()
    apool.free_all_blocks(stream=cp.cuda.Stream.null)


variants = {
    "base": (pool.malloc, free_device),
    "locked": (one_at_a_time(pool.malloc), free_device),
    "async": (apool.malloc, empty_async),
    "async-locked": (one_at_a_time(apool.malloc), empty_async),
    "kept": (pool.malloc, sync_device),
}
print("async release threshold", apool.get_limit(), flush=True)
x = from_zarr_gpu(sys.argv[1], device="gpu")
body = persisting(x, 16)
for alloc, _ in variants.values():
    use(alloc)
    body()  # warm each
names = list(variants)
rec = {v: [] for v in names}
rel = {v: [] for v in names}
for r in range(int(sys.argv[2])):
    for v in names if r % 2 == 0 else names[::-1]:
        alloc, before = variants[v]
        use(alloc)
        if v == "kept":
            body()  # the pool this allocator keeps is the one the pass before left
        t = time.perf_counter()
        before()
        rel[v].append((time.perf_counter() - t) * 1e3)
        rec[v].append(traced_pass(body))
for v in names:
    ms = [p[0] for p in rec[v]]
    print(
        f"{v:8s} median {statistics.median(ms):6.1f} ms {x.nbytes / statistics.median(ms) / 1e6:5.2f} GB/s; "
        f"release {statistics.median(rel[v]):5.1f} ms; passes (ms, first 4 reads, first call @): "
        + "  ".join(f"{p[0]:.0f} {p[1]} @{p[2]}" for p in rec[v]),
        flush=True,
    )
