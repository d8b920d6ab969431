"""Whether a task's small host-device copies wait behind other tasks' large ones: the time of a small
read-back and of a small upload (each followed by a kernel that uses it), on a stream of their own,
alone and while another thread copies 256 MiB from pinned host memory to the device back to back on
its own stream (as kvikio's compat-mode reads do), by DMA (cupy's ``get`` and ``asarray``) and by
kernels through mapped pinned memory (``transfer.mapped``: no copy engine). Run on the GPU host:
    python3 benchmarks/probe_copies.py [--rounds 200]
"""

import argparse
import threading
import time
from collections.abc import Callable

import cupy as cp
import cupyx
import numpy as np

from zarr_dask_gpu.gpu.runtime import setup
from zarr_dask_gpu.gpu.runtime.transfer import mapped

p = argparse.ArgumentParser()
p.add_argument("--rounds", type=int, default=200)
p.add_argument("--mib", type=int, default=256, help="the busy thread's copy")
args = p.parse_args()
setup.configure()

stream = cp.cuda.Stream(non_blocking=True)
small = np.arange(4096, dtype=np.int64)  # 32 KiB: a task's block table is of this order
dev = cp.asarray(small)
target = cp.empty_like(dev)
pinned = cupyx.empty_pinned(small.shape, small.dtype)
view = mapped(pinned).view(small.dtype)
# an explicit kernel: cupy's `a[...] = b` of like contiguous arrays is a cudaMemcpyAsync (a DMA copy)
bus_copy = cp.ElementwiseKernel("T x", "T y", "y = x", "probe_bus_copy")


def dma_read() -> None:
    dev.get(stream=stream)


def dma_upload() -> None:
    with stream:
        cp.asarray(small).sum()
    stream.synchronize()


def kernel_read() -> None:
    with stream:
        bus_copy(dev, view)  # a kernel writing host memory over the bus
    stream.synchronize()


def kernel_upload() -> None:
    pinned[...] = small
    with stream:
        bus_copy(view, target)  # a kernel reading host memory over the bus
        target.sum()
    stream.synchronize()


def kernel_only() -> None:
    with stream:
        dev.sum()
    stream.synchronize()


def timed(f: Callable[[], None]) -> str:
    f()
    t = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        f()
        t.append(time.perf_counter() - t0)
    ms = np.array(t) * 1e3
    return f"median {np.median(ms):7.3f} ms, p90 {np.percentile(ms, 90):7.3f}, max {ms.max():7.3f}"


def busy(stop: threading.Event) -> None:
    host = cupyx.empty_pinned(args.mib << 20, np.uint8)
    target = cp.empty(args.mib << 20, np.uint8)
    s = cp.cuda.Stream(non_blocking=True)
    while not stop.is_set():
        target.set(host, stream=s)
        s.synchronize()


cases = {
    "a kernel alone (no copy)": kernel_only,
    "read-back by DMA (ndarray.get)": dma_read,
    "upload by DMA (cupy.asarray), then a kernel": dma_upload,
    "read-back by a kernel into mapped pinned memory": kernel_read,
    "upload through mapped pinned memory, read by a kernel": kernel_upload,
}
for label in ("alone", f"while another stream copies {args.mib} MiB host-to-device back to back"):
    stop = threading.Event()
    worker = threading.Thread(target=busy, args=(stop,)) if label != "alone" else None
    if worker:
        worker.start()
        time.sleep(0.2)
    print(label, flush=True)
    for name, f in cases.items():
        print(f"  {name:64s} {timed(f)}", flush=True)
    stop.set()
    if worker:
        worker.join()
