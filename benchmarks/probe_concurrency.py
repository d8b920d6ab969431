"""Whether concurrent decode calls beat one: N of dataset A's chunks (its files in turn, as
``probe_zstd.py`` takes them) decoded by this package's zstd kernels and by nvCOMP, in one call, in K
calls of N/K on K streams from K threads started at once, and in calls started every few ms (as a
pass's reads start them); then one call's kernels alone at 128-512 chunks. Values checked against
numcodecs. Run on the GPU host after `zarr-dask-gpu bench` (or `python3 -m
zarr_dask_gpu.bench.datasets A`) wrote dataset A:
    python3 benchmarks/probe_concurrency.py [N]
"""

import sys
import threading
import time
from pathlib import Path

import cupy as cp
import numpy as np
from numcodecs import Zstd

from zarr_dask_gpu.bench import ceilings, datasets
from zarr_dask_gpu.bench.timing import settings
from zarr_dask_gpu.gpu.decoders import decompress, zstd_blocks
from zarr_dask_gpu.gpu.runtime.sync import wait

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2048
found = datasets.chunk_files(datasets.DEFAULT_PATH)
files = [found[i % len(found)] for i in range(N)]
nbytes = len(bytes(Zstd().decode(Path(files[0]).read_bytes())))
sizes, offs = ceilings.layout(files)
comp = ceilings.compressed(files)  # laid out and read as the bench's decode ceilings read them
ceilings.kvikio_read_all(files, comp)
out = cp.empty(nbytes * N, np.uint8)
SRC = np.uint64(comp.data.ptr) + offs[:-1].astype(np.uint64)
DST = np.uint64(out.data.ptr) + np.arange(N, dtype=np.uint64) * np.uint64(nbytes)
SIZES = sizes.astype(np.uint64)
print(f"{N} frames of {nbytes / 2**20:.1f} MiB, {comp.nbytes / 1e9:.2f} GB compressed", flush=True)
streams = [cp.cuda.Stream(non_blocking=True) for _ in range(32)]


def call(idx: np.ndarray, stream: cp.cuda.Stream, log: list, t0: float) -> None:
    with stream:
        a = time.perf_counter()
        done = decompress.launch(
            "zstd", SRC[idx], SIZES[idx], DST[idx], np.full(len(idx), nbytes, np.uint64), stream
        )
        wait(stream)
        b = time.perf_counter()
        assert not done.failures()
        log.append((a - t0, b - a))


def run(k: int, delta_ms: float, decoder: str = "blocks") -> tuple[float, list]:
    parts = np.array_split(np.arange(N), k)
    log: list = []
    with settings({"zstd-decoder": decoder}):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        threads = []
        for i, p in enumerate(parts):
            th = threading.Thread(target=call, args=(p, streams[i], log, t0))
            target = t0 + i * delta_ms / 1e3
            while time.perf_counter() < target:
                time.sleep(0.0002)
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        t = time.perf_counter() - t0
    return t, sorted(log)


def check() -> None:
    for i in (0, N // 2, N - 1):
        want = np.frombuffer(Zstd().decode(Path(files[i]).read_bytes()), np.uint8)
        assert np.array_equal(out[i * nbytes : (i + 1) * nbytes].get(), want), i


run(1, 0)
check()
for decoder in ("blocks", "nvcomp"):
    for k, delta in ((1, 0), (2, 0), (4, 0), (8, 0), (16, 0), (8, 20), (8, 10), (16, 10)):
        if decoder == "nvcomp" and k > 8:
            continue
        best = None
        for _ in range(3):
            t, log = run(k, delta, decoder)
            if best is None or t < best[0]:
                best = (t, log)
        t, log = best
        calls = " ".join(f"{a * 1e3:.0f}+{d * 1e3:.0f}" for a, d in log)
        print(
            f"{decoder:6s} {k:2d} calls of {N // k:4d}, every {delta:3.0f} ms: {t * 1e3:6.1f} ms "
            f"{N * nbytes / t / 1e9:6.2f} GB/s | {calls}",
            flush=True,
        )
# one call's kernels alone, at 128, 256 and 512 chunks
for n in (128, 256, 512):
    with settings({"zstd-decoder": "blocks"}), zstd_blocks.kernel_times() as launches:
        call(np.arange(n), streams[0], [], time.perf_counter())
    ms: dict = {}
    for name, v in launches:
        ms[name] = ms.get(name, 0.0) + v
    print(f"{n} chunks alone: " + ", ".join(f"{a} {b:.1f}" for a, b in ms.items()), flush=True)
check()
