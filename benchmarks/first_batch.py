"""Seconds from building a ``ZarrSamples`` to its first batch on the GPU, in a fresh process whose
CUDA context torch has already made (as a training process has before its loader):

    python3 benchmarks/first_batch.py [--path /tmp/era5-first-batch.zarr]

Writes (once) a small group of ``loader_bench.py``'s layout (4 variables, 64 time steps). Run it
more than once: the first process on a host compiles the package's kernels into cupy's on-disk
kernel cache, the next ones load them from there.
"""

import argparse
import time
from pathlib import Path

import torch
from loader_bench import NAMES, write  # benchmarks/, beside this script

from zarr_dask_gpu.ml.tensors import ZarrSamples

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--path", default="/tmp/era5-first-batch.zarr")
args = p.parse_args()
write(Path(args.path), 64, 4)
torch.zeros(1, device="cuda")
t0 = time.perf_counter()
ds = ZarrSamples(args.path, 16, variables=list(NAMES[:4]), sample_dims=("time",), prefetch=8, device="gpu")
next(iter(ds))
torch.cuda.synchronize()
print(f"first batch {time.perf_counter() - t0:.3f} s after building the loader began")
