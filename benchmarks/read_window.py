"""The GPU reader's sliding window of open files against the windows it had before (64 files, each
window's reads all waited for before the next opened), in passes of ``from_zarr_gpu(path).persist()``
as the bench's first row times them (16 threads, cupy's pool emptied before each pass), in turns.
Run on the GPU host after `zarr-dask-gpu bench` has written the dataset:
    python3 benchmarks/read_window.py [--path /tmp/bench-a.zarr-large] [--rounds 6]
"""

import argparse
import contextlib
import functools
import statistics
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import kvikio

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.bench.timing import free_device, in_turns, persisting
from zarr_dask_gpu.gpu import reader
from zarr_dask_gpu.storage import Read


def in_windows(reads: Sequence[Read], starts: Sequence[int], buf: Any) -> None:
    """The reader's loop before the sliding window (retries left out: no read fails here)."""
    for w in range(0, len(reads), reader._WINDOW):
        window = range(w, min(w + reader._WINDOW, len(reads)))
        with reader.in_flight() as (files, futures):
            for k in window:
                files.append(kvikio.CuFile(reads[k].path, "r"))
                view = buf[starts[k] : starts[k] + reads[k].size]
                futures.append(files[-1].pread(view, reads[k].size, reads[k].offset))
            reader.collect(futures, [reads[k] for k in window])


@contextlib.contextmanager
def reading_by(loop: Callable[..., None]) -> Iterator[None]:
    old, reader._read_all = reader._read_all, loop
    try:
        yield
    finally:
        reader._read_all = old


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr-large")
    p.add_argument("--rounds", type=int, default=6)
    args = p.parse_args()
    x = from_zarr_gpu(args.path, device="gpu")
    body = persisting(x, 16)
    loops = {"sliding": reader._read_all, "windows": in_windows}

    def run(loop: Callable[..., None]) -> None:
        with reading_by(loop):
            body()

    for loop in loops.values():
        run(loop)  # warm
    times = in_turns(
        {k: functools.partial(run, v) for k, v in loops.items()}, args.rounds, free_device, alternate=True
    )
    for name, t in times.items():
        m = statistics.median(t)
        passes = " ".join(f"{s * 1e3:.0f}" for s in t)
        print(
            f"{args.path} {name:8s} median {m * 1e3:6.1f} ms {x.nbytes / m / 1e9:6.2f} GB/s passes {passes}"
        )


if __name__ == "__main__":
    main()
