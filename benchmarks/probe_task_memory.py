"""Where one task's peak device memory goes: every allocation of cupy's pool during a task (dataset
A's first block, or ``--path``'s), named by the line of this package that asked for it. Run on the
GPU host after `zarr-dask-gpu bench` (or `python3 -m zarr_dask_gpu.bench.datasets A-large`) wrote
the store:
    python3 benchmarks/probe_task_memory.py [--path /tmp/bench-a.zarr] [--set decode-call-bytes=256MiB]

Prints, over the block's bytes: the pool's bytes from the device at the end (the bench's "task
peak"), the most bytes in use at once and what was in use then, and which allocations made the pool
take new memory from the device instead of reusing what was freed (cupy's pool reuses a freed block
only for allocations on the stream that was current when it was allocated). The hooks see this
thread's allocations only.
"""

import argparse
import traceback
from collections import defaultdict

import cupy as cp
from cupy.cuda import memory_hook

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.bench import datasets
from zarr_dask_gpu.bench.timing import parse_settings, settings, task_result

p = argparse.ArgumentParser()
p.add_argument("--path", default=datasets.DEFAULT_PATH)
p.add_argument("--set", default="", help="package settings for the task, k=v,k=v")
args = p.parse_args()


def site() -> str:
    """The innermost line of this package on the stack (above this function and the hook's)."""
    for f in reversed(traceback.extract_stack()[:-2]):
        if "zarr_dask_gpu" in f.filename:
            return f"{f.filename.split('zarr_dask_gpu/')[-1]}:{f.lineno} {f.name}"
    return "elsewhere"


class Recorder(memory_hook.MemoryHook):
    name = "probe_task_memory"

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, str]] = {}
        self.used = self.most = 0
        self.at_most: dict[str, int] = {}
        self.grew: dict[str, int] = defaultdict(int)
        self.pending = ""

    def alloc_postprocess(self, **kw: int) -> None:  # new memory from the device
        self.grew[site()] += kw["mem_size"]

    def malloc_postprocess(self, **kw: int) -> None:
        self.live[kw["mem_ptr"]] = (kw["mem_size"], site())
        self.used += kw["mem_size"]
        if self.used > self.most:
            self.most = self.used
            by: dict[str, int] = defaultdict(int)
            for size, where in self.live.values():
                by[where] += size
            self.at_most = dict(by)

    def free_postprocess(self, **kw: int) -> None:
        size, _ = self.live.pop(kw["mem_ptr"], (0, ""))
        self.used -= size


values = parse_settings(args.set)
x = from_zarr_gpu(args.path)
first = x.blocks[(0,) * x.ndim]
pool = cp.get_default_memory_pool()
task_result(first)  # warm: kernels compiled, streams made
cp.cuda.Device().synchronize()
pool.free_all_blocks()
with settings(values):
    rec = Recorder()
    with rec:
        z = task_result(first)
        cp.cuda.Device().synchronize()
block = z.nbytes
print(f"{args.path}: block {x.chunksize} ({block / 2**20:.0f} MiB), settings {values or 'defaults'}")
print(f"pool's bytes from the device: {pool.total_bytes() / block:.2f}x block")
print(f"most in use at once: {rec.most / block:.2f}x block, of which:")
for where, size in sorted(rec.at_most.items(), key=lambda kv: -kv[1]):
    print(f"  {size / block:6.3f}x  {where}")
print("new device memory taken, by the allocation that took it:")
for where, size in sorted(rec.grew.items(), key=lambda kv: -kv[1]):
    print(f"  {size / block:6.3f}x  {where}")
other = pool.total_bytes() - sum(rec.grew.values())  # hooks are per thread: the task's other threads'
print(f"  {other / block:6.3f}x  taken by other threads")
