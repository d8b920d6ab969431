"""Multi-GPU scaling: from_zarr_gpu(...).persist() on a LocalCUDACluster of 1..N workers (one per GPU).

Run on a multi-GPU host (or, with --device cpu, on CPU worker processes to check the script):
    python3 benchmarks/scaling.py --sizes-gib 4 16 --json scaling.json
For each worker count it reports GB/s, the scaling efficiency (GB/s at N over N times GB/s at 1),
how evenly the blocks spread over the workers, that values equal zarr-python's on a sample of
blocks, and, at the largest count, a mean over one axis of the persisted blocks and a rechunk that
moves blocks between workers (over TCP, and over UCX where ucx-py is installed).
"""

import argparse
import json
import os
import time

import numpy as np


def _workers(device: str) -> int:
    if device == "cpu":
        return min(4, os.cpu_count() or 1)
    import cupy

    return cupy.cuda.runtime.getDeviceCount()


def run(path: str, gib: float, device: str, counts: list[int], protocol: str, threads: int) -> list[dict]:
    from distributed import wait

    from zarr_dask_gpu import from_zarr_gpu
    from zarr_dask_gpu.cluster import connect, local_cluster
    from zarr_dask_gpu.sample import write_sample

    a = write_sample(path, int(gib * 2**30))
    rows = []
    for n in counts:
        kwargs = (
            {"n_workers": n}
            if device == "cpu"
            else {"CUDA_VISIBLE_DEVICES": list(range(n)), "protocol": protocol, "threads_per_worker": threads}
        )
        if device == "cpu":
            kwargs["threads_per_worker"] = 1
        with local_cluster(device, **kwargs) as cluster, connect(cluster) as client:
            times = []
            for i in range(3):  # the first pass warms workers, kernels and the page cache
                x = from_zarr_gpu(path, device=device, name=f"scaling-{n}-{i}")
                t0 = time.perf_counter()
                y = x.persist()
                wait(y)
                times.append(time.perf_counter() - t0)
                if i < 2:
                    client.cancel(y)
            per_worker: dict[str, int] = {}
            for addrs in client.who_has(y).values():
                for w in addrs:
                    per_worker[w] = per_worker.get(w, 0) + 1
            sample = [0, x.numblocks[0] // 2, x.numblocks[0] - 1]
            for b in sample:
                block = y.blocks[b].compute()
                block = block.get() if hasattr(block, "get") else block
                lo = sum(x.chunks[0][:b])
                assert np.array_equal(block, a[lo : lo + x.chunks[0][b]]), f"block {b} differs"
            row = {
                "workers": n,
                "gib": gib,
                "seconds": min(times[1:]),
                "gbps": x.nbytes / min(times[1:]) / 1e9,
                "blocks_per_worker": sorted(per_worker.values()),
                "protocol": protocol,
            }
            if n == counts[-1]:
                t0 = time.perf_counter()
                m = y.mean(axis=0).compute()
                row["mean_axis0_s"] = time.perf_counter() - t0
                ref = a[:].mean(axis=0, dtype="f8")
                row["mean_max_abs_err"] = float(np.abs((m.get() if hasattr(m, "get") else m) - ref).max())
                t0 = time.perf_counter()
                r = y.rechunk({0: y.shape[0], 1: y.shape[1] // max(n, 1)}).persist()
                wait(r)
                row["rechunk_s"] = time.perf_counter() - t0
            rows.append(row)
            print(json.dumps(row), flush=True)
    one = next((r["gbps"] for r in rows if r["workers"] == 1), None)
    for r in rows:
        r["efficiency"] = r["gbps"] / (r["workers"] * one) if one else None
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/scaling.zarr")
    p.add_argument("--sizes-gib", type=float, nargs="+", default=[4.0, 16.0])
    p.add_argument("--device", default="gpu", choices=["gpu", "cpu"])
    p.add_argument("--protocol", default="tcp", choices=["tcp", "ucx"])
    p.add_argument("--threads", type=int, default=16, help="threads per GPU worker")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    total = _workers(args.device)
    counts = sorted({1, *[c for c in (2, 4, 8) if c <= total], total})
    out = []
    for gib in args.sizes_gib:
        out += run(f"{args.path}-{gib:g}", gib, args.device, counts, args.protocol, args.threads)
    print(f"{'GiB':>5} {'workers':>7} {'GB/s':>7} {'efficiency':>10}  blocks per worker")
    for r in out:
        eff = f"{r['efficiency']:.2f}" if r["efficiency"] is not None else "-"
        print(f"{r['gib']:5g} {r['workers']:7d} {r['gbps']:7.2f} {eff:>10}  {r['blocks_per_worker']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
