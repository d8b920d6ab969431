"""What the bench's empty memory pool costs a pass: ``from_zarr_gpu(path).persist()`` on 16 threads,
timed as the bench times it (persist, device sync, the result dropped and cupy's pool emptied) against
passes that keep the pool's memory for the next one.

Run on the GPU host after the bench (or gpu_check's ``data`` step) wrote the datasets:
    python3 benchmarks/probe_pool.py [PATH ...]
"""

import sys
import time

import cupy as cp

from zarr_dask_gpu import from_zarr_gpu


def main() -> None:
    pool = cp.get_default_memory_pool()
    for path in sys.argv[1:] or ["/tmp/bench-a.zarr", "/tmp/bench-a.zarr-B", "/tmp/bench-a.zarr-D"]:
        x = from_zarr_gpu(path, device="gpu")

        def one_pass(empty: bool, x=x) -> float:  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            y = x.persist(scheduler="threads", num_workers=16)
            cp.cuda.Device().synchronize()
            del y
            if empty:
                pool.free_all_blocks()
            return time.perf_counter() - t0

        one_pass(False)  # warm-up: kernels, codecs, streams
        for empty in (True, False, True, False):
            one_pass(empty)  # the pool as the next passes find it
            ms = sorted(one_pass(empty) * 1e3 for _ in range(3))
            print(
                f"{path}: pool {'emptied' if empty else 'kept   '} after each pass: "
                f"{' / '.join(f'{t:.0f}' for t in ms)} ms ({x.nbytes / ms[1] / 1e6:.2f} GB/s median)",
                flush=True,
            )


if __name__ == "__main__":
    main()
