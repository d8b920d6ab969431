"""Where a pass's task threads spend their wall time, by sampling their Python stacks: a thread beside
the pass reads every thread's innermost frame (``sys._current_frames``) every ``--every`` ms, and each
sample of a task thread counts for the phase it is in (``zarr_dask_gpu.phases``) and the line it
stands at (a thread inside a C call, such as a CUDA wait or a kvikio read, stands at the line that
made the call). The sampler needs the GIL, so the gaps between its samples longer than 2 ms are
counted too: some thread held the GIL that long.

Run on the GPU host after `zarr-dask-gpu bench` has written the dataset:
    python3 benchmarks/sample_stacks.py --path /tmp/bench-a.zarr-E --rows-per-block 256 [--release]
        [--switch-ms 5] [--top 12]
Each pass reads every block of the array (tasks of ``--rows-per-block`` rows along the first axis) on
``--threads`` threads; the second of two passes is sampled.
"""

import argparse
import sys
import threading
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from zarr_dask_gpu import phases
from zarr_dask_gpu.bench.timing import free_device, sync_device
from zarr_dask_gpu.resolve import open_array_info
from zarr_dask_gpu.task import read_region


def _where(frame: object) -> str:
    """The innermost frame's file, function and line, and the package's frame it runs under."""
    inner = f"{frame.f_code.co_filename.rsplit('/', 2)[-1]}:{frame.f_code.co_name}:{frame.f_lineno}"  # type: ignore[attr-defined]
    f = frame
    while f is not None and "zarr_dask_gpu" not in f.f_code.co_filename:  # type: ignore[attr-defined]
        f = f.f_back  # type: ignore[attr-defined]
    if f is None or f is frame:
        return inner
    return f"{inner} <- {f.f_code.co_name}:{f.f_lineno}"  # type: ignore[attr-defined]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", required=True)
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--rows-per-block", type=int, default=64)
    p.add_argument("--every", type=float, default=0.5, help="ms between samples")
    p.add_argument("--switch-ms", type=float, default=None, help="sys.setswitchinterval, in ms")
    p.add_argument("--release", action="store_true", help="cupy's pool emptied before each pass")
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--device", default="gpu", choices=("gpu", "cpu"))
    args = p.parse_args()
    if args.switch_ms is not None:
        sys.setswitchinterval(args.switch_ms / 1e3)
    info = open_array_info(args.path)
    rows, rest = info.shape[0], tuple(info.shape[1:])
    boxes = [
        ((r, *(0,) * len(rest)), (min(r + args.rows_per_block, rows), *rest))
        for r in range(0, rows, args.rows_per_block)
    ]
    nbytes = info.dtype.itemsize * int(np.prod(info.shape))
    samples: list[tuple[float, dict[int, str]]] = []
    stop = threading.Event()

    def sample() -> None:
        me = threading.get_ident()
        while not stop.is_set():
            now = time.perf_counter()
            samples.append((now, {t: _where(f) for t, f in sys._current_frames().items() if t != me}))
            time.sleep(args.every / 1e3)

    with ThreadPoolExecutor(args.threads) as ex:
        for k in range(2):
            if args.release and args.device == "gpu":
                free_device()
            with phases.collect() as spans:
                sampler = threading.Thread(target=sample, daemon=True) if k else None
                if sampler:
                    sampler.start()
                t0 = time.perf_counter()
                outs = list(ex.map(lambda b: read_region(info, *b, args.device, False), boxes))
                if args.device == "gpu":
                    sync_device()
                dt = time.perf_counter() - t0
                if sampler:
                    stop.set()
                    sampler.join()
            del outs
    print(f"{args.path}: {len(boxes)} tasks, pass {dt * 1e3:.1f} ms ({nbytes / dt / 1e9:.2f} GB/s)")
    report(spans, samples, t0, args.top)


def report(
    spans: list[phases.Span], samples: list[tuple[float, dict[int, str]]], t0: float, top: int
) -> None:
    """Each phase's samples by line (ms of thread time, the sampling interval each), then the gaps."""
    inner = {"task", "plan"}  # phases that hold others: a sample counts for the innermost
    by_thread: dict[int, list[phases.Span]] = defaultdict(list)
    for s in spans:
        if s.name != "decode-call":
            by_thread[s.thread].append(s)
    counts: dict[str, Counter] = defaultdict(Counter)
    for (t, frames), nxt in zip(samples, [s[0] for s in samples[1:]] + [samples[-1][0]], strict=True):
        dt = (nxt - t) * 1e3
        for tid, where in frames.items():
            if tid not in by_thread:
                continue
            open_ = [s for s in by_thread[tid] if s.start <= t < s.end]
            named = [s for s in open_ if s.name not in inner] or open_
            phase = min(named, key=lambda s: s.end - s.start).name if named else "(between phases)"
            counts[phase][where] += dt
    for phase, c in sorted(counts.items(), key=lambda kv: -sum(kv[1].values())):
        print(f"{phase}: {sum(c.values()):.1f} thread-ms sampled")
        for where, ms in c.most_common(top):
            print(f"    {ms:7.1f}  {where}")
    gaps = np.diff([t for t, _ in samples]) * 1e3
    long = gaps[gaps > 2]
    print(
        f"sampler: {len(samples)} samples, gaps over 2 ms: {len(long)} "
        f"({long.sum():.1f} ms; longest {gaps.max() if len(gaps) else 0:.1f} ms)"
    )
    first = min(s.start for s in spans)
    print(f"first span {(first - t0) * 1e3:.1f} ms into the pass")


if __name__ == "__main__":
    main()
