"""The bench's default row (dataset A persisted in-process) for several source trees of this package,
in turns, so that a change's speed is compared on one host in one run.

    python3 benchmarks/compare_trees.py OLD_TREE NEW_TREE [--path /tmp/bench-a.zarr] [--rounds 3]

Each tree is a checkout of the repository with its C extension built (``zarr_dask_gpu/_preads*.so``).
Dataset A must exist (``python3 -m zarr_dask_gpu.bench.datasets`` writes it; its page cache is
warmed here). Each round runs every tree in a fresh process: one untimed pass, then the median of
``--repeat`` passes of ``from_zarr_gpu(path, device="gpu").persist()`` on ``--threads`` threads,
cupy's pool emptied after each. Only the public API is used, so any two versions compare.
"""

import argparse
import os
import statistics
import subprocess
import sys

from zarr_dask_gpu.bench import chunk_files, warm_cache

PASSES = """
import sys, time, statistics
import cupy as cp
from zarr_dask_gpu import from_zarr_gpu, __file__ as where
path, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = from_zarr_gpu(path, device="gpu")
def once():
    y = x.persist(scheduler="threads", num_workers=threads)
    cp.cuda.Device().synchronize()
    del y
    cp.get_default_memory_pool().free_all_blocks()
once()
times = []
for _ in range(repeat):
    t0 = time.perf_counter(); once(); times.append(time.perf_counter() - t0)
print(x.nbytes / statistics.median(times) / 1e9, where)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("trees", nargs="+")
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--threads", type=int, default=16)
    args = p.parse_args()
    warm_cache(chunk_files(args.path))
    rates: dict[str, list[float]] = {t: [] for t in args.trees}
    for r in range(args.rounds):
        for tree in args.trees:
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
            cmd = [sys.executable, "-c", PASSES, args.path, str(args.threads), str(args.repeat)]
            out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True)
            rate, where = out.stdout.split()
            rates[tree].append(float(rate))
            print(f"round {r}: {tree:30s} {float(rate):7.2f} GB/s  ({where})", flush=True)
    first = statistics.median(rates[args.trees[0]])
    for tree, rs in rates.items():
        m = statistics.median(rs)
        print(f"{tree:30s} median {m:7.2f} GB/s over {len(rs)} rounds, {m / first:.3f} of the first tree")


if __name__ == "__main__":
    main()
