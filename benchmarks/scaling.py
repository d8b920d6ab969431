"""Multi-GPU scaling: from_zarr_gpu(...).persist() on a LocalCUDACluster of 1..N workers (one per GPU).

Run on a multi-GPU host (or, with --device cpu, on CPU worker processes to check the script):
    python3 benchmarks/scaling.py --sizes-gib 4 16 --json scaling.json
For each worker count it reports GB/s, the scaling efficiency (GB/s at N over N times GB/s at 1),
how the blocks spread over the workers, and that values equal zarr-python's on a sample of blocks.
At the largest count, under each protocol (TCP, and UCX where distributed-ucxx is installed), it also
times a mean over one axis of the persisted blocks and a rechunk from row blocks to column blocks of
the same size, which moves (N-1)/N of the array between workers, and checks both against zarr-python.
"""

import argparse
import importlib.util
import json
import os
import time

import numpy as np


def _workers(device: str) -> int:
    if device == "cpu":
        return min(4, os.cpu_count() or 1)
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def _host(x):
    return x.get() if hasattr(x, "get") else x


def _cluster(device: str, n: int, protocol: str, threads: int):
    from zarr_dask_gpu.cluster import local_cluster

    if device == "cpu":
        return local_cluster("cpu", n_workers=n, threads_per_worker=1, protocol=protocol)
    return local_cluster(
        "gpu", CUDA_VISIBLE_DEVICES=list(range(n)), protocol=protocol, threads_per_worker=threads
    )


def _moves(a, y, n: int, row: dict) -> None:
    """Time a mean over axis 0 and a rechunk to column blocks; check both against ``a``."""
    from distributed import wait

    seconds = []
    for _ in range(2):  # the first pass compiles cupy's reduction kernels in each worker
        t0 = time.perf_counter()
        m = _host(y.mean(axis=0).compute())
        seconds.append(time.perf_counter() - t0)
    row["mean_axis0_s"], row["mean_axis0_first_s"] = seconds[1], seconds[0]
    ref = a[:].mean(axis=0, dtype="f8")
    row["mean_max_abs_err"] = float(np.abs(m - ref).max())
    assert row["mean_max_abs_err"] < 1e-3, row
    # column blocks of the row blocks' size: each gathers a piece of every row block ("tasks": the
    # blocks travel whole through the comm, as cupy arrays, rather than through p2p's host buffers)
    cols = max(y.chunks[0][0] * y.shape[1] // y.shape[0], 1)
    seconds = []
    # the first pass, to blocks twice as wide (other keys), also opens the connections between workers
    for width in (2 * cols, cols):
        t0 = time.perf_counter()
        r = y.rechunk({0: y.shape[0], 1: width}, method="tasks").persist()
        wait(r)
        seconds.append(time.perf_counter() - t0)
    row["rechunk_s"], row["rechunk_first_s"] = seconds[1], seconds[0]
    row["rechunk_gbps"] = y.nbytes / row["rechunk_s"] / 1e9
    row["rechunk_moved_fraction"] = (n - 1) / n
    last = r.numblocks[1] - 1
    assert np.array_equal(_host(r.blocks[0, last].compute()), a[:, last * cols : (last + 1) * cols])


def run(path: str, gib: float, device: str, runs: list[tuple[int, str]], threads: int) -> list[dict]:
    from distributed import wait

    from zarr_dask_gpu import from_zarr_gpu
    from zarr_dask_gpu.cluster import connect
    from zarr_dask_gpu.sample import write_sample

    a = write_sample(path, int(gib * 2**30))
    rows = []
    for n, protocol in runs:
        with _cluster(device, n, protocol, threads) as cluster, connect(cluster) as client:
            times = []
            for i in range(5):  # the first pass warms workers, kernels and the page cache; best of the rest
                x = from_zarr_gpu(path, device=device, name=f"scaling-{n}-{protocol}-{i}")
                t0 = time.perf_counter()
                y = x.persist()
                wait(y)
                times.append(time.perf_counter() - t0)
                if i < 4:
                    client.cancel(y)
            per_worker = dict.fromkeys(client.scheduler_info()["workers"], 0)
            for addrs in client.who_has(y).values():
                for w in addrs:
                    per_worker[w] += 1
            for b in [0, x.numblocks[0] // 2, x.numblocks[0] - 1]:
                lo = sum(x.chunks[0][:b])
                assert np.array_equal(_host(y.blocks[b].compute()), a[lo : lo + x.chunks[0][b]]), f"block {b}"
            row = {
                "workers": n,
                "gib": gib,
                "protocol": protocol,
                "seconds": min(times[1:]),
                "gbps": x.nbytes / min(times[1:]) / 1e9,
                "pass_seconds": [round(t, 4) for t in times],
                "blocks": x.npartitions,
                "blocks_per_worker": sorted(per_worker.values()),
            }
            if n == runs[-1][0]:
                _moves(a, y, n, row)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/scaling.zarr")
    p.add_argument("--sizes-gib", type=float, nargs="+", default=[4.0, 16.0])
    p.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    ucx = ["ucx"] if importlib.util.find_spec("distributed_ucxx") else []
    p.add_argument("--protocols", nargs="+", default=["tcp", *ucx], help="default: tcp, and ucx if installed")
    p.add_argument("--threads", type=int, default=16, help="threads per GPU worker")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    total = _workers(args.device)
    counts = sorted({1, *[c for c in (2, 4, 8) if c <= total], total})
    # every count over the first protocol, then the largest count over the others (whose set-up can fail
    # on a host without their transport: the first protocol's rows are printed by then)
    plans = [[(n, args.protocols[0]) for n in counts], [(counts[-1], p) for p in args.protocols[1:]]]
    out = []
    for runs in filter(None, plans):
        for gib in args.sizes_gib:
            out += run(f"{args.path}-{gib:g}", gib, args.device, runs, args.threads)
    for r in out:
        one = next((o["gbps"] for o in out if o["gib"] == r["gib"] and o["workers"] == 1), None)
        r["efficiency"] = r["gbps"] / (r["workers"] * one) if one else None
    line = "{:>5} {:>7} {:>8} {:>7} {:>10} {:>7} {:>12}  {}"
    print(line.format("GiB", "workers", "protocol", "GB/s", "efficiency", "mean s", "rechunk GB/s", "blocks"))
    for r in out:
        eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
        mean = f"{r['mean_axis0_s']:.2f}" if "mean_axis0_s" in r else "-"
        rech = f"{r['rechunk_gbps']:.2f}" if "rechunk_gbps" in r else "-"
        gbps, spread = f"{r['gbps']:.2f}", r["blocks_per_worker"]
        print(line.format(r["gib"], r["workers"], r["protocol"], gbps, eff, mean, rech, spread))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
