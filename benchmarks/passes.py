"""Passes of ``from_zarr_gpu(path).persist()`` as the bench's first row times them (16 threads, cupy's
pool emptied before each pass, untimed), with variants in turns: package settings, or kvikio's own
settings (``kvikio:num_threads=32,task_size=16777216``). Each variant's graph is made under its settings (so
``block-size=256MiB`` or ``gpu-min-blocks=8`` shape the tasks) and warmed once; a round runs each
once, every other round in the reverse order, so that a place in the round (after which variant's
pass) weighs on all alike.
Run on the GPU host after `zarr-dask-gpu bench` (or ``python3 -m zarr_dask_gpu.bench.datasets A-large``)
has written the dataset:
    python3 benchmarks/passes.py [--path /tmp/bench-a.zarr-large] [--rounds 5] [--variants default
        join-tasks=3 read-slots=2 kvikio:num_threads=32 ...]
"""

import argparse
import contextlib
import statistics
from typing import Any

import kvikio.defaults

from zarr_dask_gpu import from_zarr_gpu
from zarr_dask_gpu.bench.timing import free_device, in_turns, parse_settings, persisting, settings


def variant(text: str) -> Any:
    """``default``, ``kvikio:KEY=INT,...`` (``kvikio.defaults``' keys) or settings as
    ``join-tasks=3,read-slots=1``: a context to run passes in."""
    if text == "default":
        return contextlib.nullcontext()
    if text.startswith("kvikio:"):
        pairs = (kv.split("=", 1) for kv in text.removeprefix("kvikio:").split(","))
        return kvikio.defaults.set({k: int(v) for k, v in pairs})
    return settings(parse_settings(text))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr-large")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", nargs="+", default=["default", "join-decodes=False"])
    args = p.parse_args()
    bodies = {}
    for v in args.variants:  # each graph made inside its variant: settings such as block-size apply
        with variant(v):
            x = from_zarr_gpu(args.path, device="gpu")
            bodies[v] = persisting(x, args.threads)

    def run(v: str) -> None:
        with variant(v):
            bodies[v]()

    for v in args.variants:
        run(v)  # compiles what the variant launches
    fns = {v: lambda v=v: run(v) for v in args.variants}
    times = in_turns(fns, args.rounds, free_device, alternate=True)
    for v, t in times.items():
        m = statistics.median(t)
        passes = " ".join(f"{s * 1e3:.0f}" for s in t)
        rate = x.nbytes / m / 1e9
        print(f"{v:24s} median {m * 1e3:6.1f} ms {rate:6.2f} GB/s  passes (ms) {passes}", flush=True)


if __name__ == "__main__":
    main()
