"""Probe: what makes nvCOMP zstd decodes of dataset A's chunks fast, and do decodes from many threads
overlap? nvCOMP's execution policy (CONCURRENCY, the default, or LATENCY), its scratch allocator
(nvCOMP's own, or cupy's pool), and how buffers are handed to nvcomp.as_arrays (cupy arrays, bare
__cuda_array_interface__ v2, v3 naming an idle stream), each case in a subprocess.

Run on the GPU host: python3 benchmarks/probe_decode.py [--path /tmp/bench-a.zarr]
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def case(path: str, policy: str, allocator: str, mode: str, iface: str = "cupy") -> None:
    from concurrent.futures import ThreadPoolExecutor

    import cupy as cp
    import numpy as np
    from nvidia import nvcomp

    if allocator == "cupy":
        nvcomp.set_device_allocator(lambda nbytes, stream: cp.cuda.alloc(nbytes))
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(path) for f in fs if f != "zarr.json")
    blobs = [Path(f).read_bytes() for f in files]
    offs = np.cumsum([0, *[(len(b) + 15) // 16 * 16 for b in blobs]])
    host = np.zeros(int(offs[-1]), np.uint8)
    for o, b in zip(offs, blobs, strict=False):
        host[o : o + len(b)] = np.frombuffer(b, np.uint8)
    comp, sizes, n = cp.asarray(host), [len(b) for b in blobs], len(blobs)
    out_size = 8 << 20
    pol = getattr(nvcomp.ExecutionPolicy, policy)
    per = 32 if mode != "all" else n
    groups = [range(i, min(i + per, n)) for i in range(0, n, per)]
    streams = [cp.cuda.Stream(non_blocking=True) for _ in groups]
    codecs = [
        nvcomp.Codec(
            algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, cuda_stream=s.ptr, execution_policy=pol
        )
        for s in streams
    ]

    idle = cp.cuda.Stream(non_blocking=True)
    configs: dict[int, object] = {}

    class Wrapped:  # a bare __cuda_array_interface__: v2 (no stream), or v3 naming an idle stream
        def __init__(self, a: cp.ndarray, version: int) -> None:
            self.a = a
            cai = {"shape": (a.nbytes,), "typestr": "|u1", "data": (a.data.ptr, False), "version": version}
            self.__cuda_array_interface__ = cai | ({"stream": idle.ptr} if version == 3 else {})

    def wrap(a: cp.ndarray) -> object:
        return Wrapped(a, 2) if iface == "v2" else Wrapped(a, 3) if iface == "v3-idle" else a

    def one(k: int) -> None:
        g, s = groups[k], streams[k]
        with s:
            out = cp.empty(len(g) * out_size, np.uint8)
            src = nvcomp.as_arrays(
                wrap(comp), [int(offs[i]) for i in g], [sizes[i] for i in g], cuda_stream=s.ptr
            )
            dst = nvcomp.as_arrays(
                wrap(out), [j * out_size for j in range(len(g))], [out_size] * len(g), cuda_stream=s.ptr
            )
            if iface != "reused-config" or k not in configs:
                configs[k] = codecs[k].decompression_config(codecs[k].compression_config([out_size] * len(g)))
            cfg = configs[k]
            codecs[k].decode(src, out=dst, decompression_config=cfg)
            ev = s.record()
            while not ev.done:
                time.sleep(0.0002)

    threads = {"all": 1, "one-group": 1, "groups-1-thread": 1, "groups-16-threads": 16}[mode]
    todo = [0] if mode in ("all", "one-group") else list(range(len(groups)))
    free0 = cp.cuda.runtime.memGetInfo()[0]
    with ThreadPoolExecutor(threads) as ex:
        for _rep in range(3):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            list(ex.map(one, todo))
            cp.cuda.Device().synchronize()
            dt = time.perf_counter() - t0
    used = (free0 - cp.cuda.runtime.memGetInfo()[0]) / 2**30
    nbytes = sum(len(groups[k]) for k in todo) * out_size
    print(
        f"{policy:11s} {allocator:6s} {mode:18s} {iface:13s} "
        f"{len(todo):2d} calls x {len(groups[todo[0]]):3d} chunks: "
        f"{dt * 1e3:7.1f} ms {nbytes / dt / 1e9:6.2f} GB/s, device memory +{used:.1f} GiB",
        flush=True,
    )
    os._exit(0)  # cupy-pool scratch and nvCOMP's exit order once segfaulted (docs/design.md)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--case", nargs=4)
    args = p.parse_args()
    if args.case:
        return case(args.path, *args.case)
    if not os.path.exists(args.path):
        from zarr_dask_gpu.sample import write_sample

        write_sample(args.path, 4 << 30, 8 << 20)
    cases = [("CONCURRENCY", "nvcomp", m, "cupy") for m in ("one-group", "all", "groups-16-threads")]
    cases += [
        ("LATENCY", "nvcomp", "groups-16-threads", i) for i in ("cupy", "v2", "v3-idle", "reused-config")
    ]
    cases += [("LATENCY", "nvcomp", "all", "v3-idle")]
    for c in cases:
        cmd = [sys.executable, __file__, "--path", args.path, "--case", *c]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        print(r.stdout.strip() or f"{c}: rc {r.returncode} {r.stderr[-300:]}", flush=True)


if __name__ == "__main__":
    main()
