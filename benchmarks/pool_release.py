"""What a pass from an emptied pool pays: A-large's passes (16 threads, ``from_zarr_gpu(path).persist()``)
in turns, every other round reversed, each after one of: cupy's pool emptied (``free_device``, as the
bench's first row), emptied then a 1 s sleep, or the pool kept (a device sync only). Prints, per pass,
its ms, its first four reads' ms and when its first decode call started.
Run on the GPU host after ``python3 -m zarr_dask_gpu.bench.datasets A-large``:
    python3 benchmarks/pool_release.py /tmp/bench-a.zarr-large ROUNDS
"""

import statistics
import sys
import time

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.bench.timing import free_device, persisting, sync_device, traced_pass

x = from_zarr_gpu(sys.argv[1], device="gpu")
body = persisting(x, 16)
body()
before = {
    "emptied": free_device,
    "emptied+1s": lambda: (free_device(), time.sleep(1.0)),
    "kept": sync_device,
}
names = list(before)
rec = {v: [] for v in names}
for r in range(int(sys.argv[2])):
    for v in names if r % 2 == 0 else names[::-1]:
        before[v]()
        rec[v].append(traced_pass(body))
for v in names:
    ms = [p[0] for p in rec[v]]
    print(
        f"{v:12s} median {statistics.median(ms):6.1f} ms; passes (ms, first 4 reads ms, first call at ms): "
        + "  ".join(f"{p[0]:.0f} {p[1]} @{p[2]}" for p in rec[v]),
        flush=True,
    )
