"""Multi-GPU scaling: from_zarr_gpu(...).persist() on a LocalCUDACluster of 1..N workers (one per GPU).

Run on a multi-GPU host (or, with --device cpu, on CPU worker processes to check the script):
    python3 benchmarks/scaling.py --sizes-gib 4 16 --json scaling.json
For each worker count it reports GB/s, the scaling efficiency (GB/s at N over N times GB/s at 1),
how the blocks spread over the workers, and that every block equals zarr-python's read of it (each
worker compares the blocks it holds). ``--variants`` repeats the first size at every count under other
settings (say ``read-slots=0``, ``block-size=1GiB`` or a dotted dask key), set in the client and its
workers' dask config.
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


def _settings(variant: str) -> dict[str, str]:
    """``"read-slots=0,distributed.x=1"`` -> ``{"zarr_dask_gpu.read-slots": "0", "distributed.x": "1"}``:
    dask config keys, this package's unless dotted."""
    pairs = (kv.split("=", 1) for kv in variant.split(",")) if variant else ()
    return {(k if "." in k else f"zarr_dask_gpu.{k}"): v for k, v in pairs}


def _cluster(device: str, n: int, protocol: str, threads: int):
    from zarr_dask_gpu.distributed.cluster import local_cluster

    if device == "cpu":
        return local_cluster("cpu", n_workers=n, threads_per_worker=1, protocol=protocol)
    return local_cluster(
        "gpu", CUDA_VISIBLE_DEVICES=list(range(n)), protocol=protocol, threads_per_worker=threads
    )


def _equals_zarr(block, path: str, lo: int) -> bool:
    """On the worker holding ``block``: is it zarr-python's read of its rows?"""
    import zarr

    return bool(np.array_equal(_host(block), zarr.open_array(path, mode="r")[lo : lo + block.shape[0]]))


def _config(keys: list[str]) -> dict:
    """On a worker: the dask config ``keys`` as the worker sees them."""
    import dask

    return {k: dask.config.get(k) for k in keys}


def _check_all(client, path: str, y) -> None:
    import dask

    starts = np.cumsum((0, *y.chunks[0][:-1]))
    blocks = y.to_delayed().ravel()
    checks = [dask.delayed(_equals_zarr)(b, path, int(lo)) for b, lo in zip(blocks, starts, strict=True)]
    ok = client.compute(checks, sync=True)
    assert all(ok), f"blocks differing from zarr-python: {[i for i, v in enumerate(ok) if not v]}"


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


def run(
    path: str, gib: float, device: str, runs: list[tuple[int, str]], threads: int, variant: str = ""
) -> list[dict]:
    import dask
    from distributed import wait

    from zarr_dask_gpu import from_zarr_gpu
    from zarr_dask_gpu.bench.timing import setting_value
    from zarr_dask_gpu.distributed.cluster import connect
    from zarr_dask_gpu.testing.sample_stores import write_sample

    a = write_sample(path, int(gib * 2**30))
    rows = []
    settings = _settings(variant)
    for n, protocol in runs:
        # set before the cluster starts: its nannies hand this process's config to their workers
        config = dask.config.set({k: setting_value(v) for k, v in settings.items()})
        with config, _cluster(device, n, protocol, threads) as cluster, connect(cluster) as client:
            times = []
            for i in range(5):  # the first pass warms workers, kernels and the page cache; best of the rest
                x = from_zarr_gpu(path, device=device, name=f"scaling-{n}-{protocol}-{variant}-{i}")
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
            t0 = time.perf_counter()
            _check_all(client, path, y)
            check_s = time.perf_counter() - t0
            seen = client.run(_config, list(settings))
            row = {
                "workers": n,
                "gib": gib,
                "protocol": protocol,
                "settings": variant,
                "worker_settings": list(seen.values()),
                "seconds": min(times[1:]),
                "gbps": x.nbytes / min(times[1:]) / 1e9,
                "pass_seconds": [round(t, 4) for t in times],
                "blocks": x.npartitions,
                "blocks_per_worker": sorted(per_worker.values()),
                "check_seconds": round(check_s, 1),
            }
            if n == runs[-1][0] and not variant:
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
    p.add_argument("--variants", nargs="*", default=[], help="extra runs (first size, protocol)")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    total = _workers(args.device)
    counts = sorted({1, *[c for c in (2, 4, 8) if c <= total], total})
    # every count over the first protocol, then the variants, then the largest count over the other
    # protocols (whose set-up can fail on a host without their transport: the rest is printed by then)
    first, others = [(n, args.protocols[0]) for n in counts], [(counts[-1], p) for p in args.protocols[1:]]
    out = []
    for gib in args.sizes_gib:
        out += run(f"{args.path}-{gib:g}", gib, args.device, first, args.threads)
    gib = args.sizes_gib[0]
    for variant in args.variants:
        out += run(f"{args.path}-{gib:g}", gib, args.device, first, args.threads, variant)
    for gib in args.sizes_gib if others else ():
        out += run(f"{args.path}-{gib:g}", gib, args.device, others, args.threads)
    for r in out:
        same = [o for o in out if (o["gib"], o["settings"], o["workers"]) == (r["gib"], r["settings"], 1)]
        r["efficiency"] = r["gbps"] / (r["workers"] * same[0]["gbps"]) if same else None
    line = "{:>5} {:>7} {:>8} {:>7} {:>10} {:>7} {:>12}  {} {}"
    head = "GiB", "workers", "protocol", "GB/s", "efficiency", "mean s", "rechunk GB/s", "blocks", ""
    print(line.format(*head))
    for r in out:
        eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
        mean = f"{r['mean_axis0_s']:.2f}" if "mean_axis0_s" in r else "-"
        rech = f"{r['rechunk_gbps']:.2f}" if "rechunk_gbps" in r else "-"
        gbps, spread = f"{r['gbps']:.2f}", r["blocks_per_worker"]
        settings = r["settings"]
        print(line.format(r["gib"], r["workers"], r["protocol"], gbps, eff, mean, rech, spread, settings))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
