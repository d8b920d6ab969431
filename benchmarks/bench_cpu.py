"""CPU mode against dask.array.from_zarr on the same store, in one run (any machine).

python3 benchmarks/bench_cpu.py [--mib 512] [--repeat 3]
"""

import argparse
import os
import statistics
import tempfile
import time

import dask
import dask.array as da

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.sample import write_sample


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default=os.path.join(tempfile.gettempdir(), "zarr-dask-gpu-bench-cpu.zarr"))
    p.add_argument("--mib", type=int, default=512)
    p.add_argument("--chunk-mib", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    a = write_sample(args.path, args.mib << 20, args.chunk_mib << 20)
    print(f"store {a.shape} {a.dtype} chunks {a.chunks}, {a.nbytes / 1e9:.2f} GB, {os.cpu_count()} CPUs")
    cases = {
        "from_zarr_gpu(device='cpu'), default blocks": lambda: from_zarr_gpu(args.path, device="cpu"),
        "from_zarr_gpu(device='cpu'), blocks = zarr chunks": lambda: from_zarr_gpu(
            args.path, device="cpu", chunks=a.chunks
        ),
        "dask.array.from_zarr": lambda: da.from_zarr(args.path),
    }
    for name, make in cases.items():
        times = []
        for _ in range(args.repeat + 1):
            x = make()
            t0 = time.perf_counter()
            with dask.config.set(scheduler="threads"):
                x.sum().compute()
            times.append(time.perf_counter() - t0)
        t = statistics.median(times[1:])
        print(f"{name:52s} {a.nbytes / t / 1e9:6.2f} GB/s  ({t:.3f} s, median of {args.repeat})")


if __name__ == "__main__":
    main()
