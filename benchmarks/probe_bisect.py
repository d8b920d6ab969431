"""Probe: which part of the read path stops 16 concurrent 32-chunk decodes from overlapping.

probe_decode.py shows nvCOMP overlapping them (about 190 ms for 16 calls on 16 threads) while the
pipeline's decodes take 16 x 120 ms. Each case swaps one part of the probe for the pipeline's and runs
in its own process. Run on the GPU host: python3 benchmarks/probe_bisect.py [--path /tmp/bench-a.zarr]
"""

import argparse
import os
import subprocess
import sys
import time

CASES = {
    "probe": "streams and codecs made up front, one shared source buffer",
    "backend-streams": "streams and codecs from GpuBackend, made on the worker threads",
    "cached-config": "as backend-streams, with one decode config per thread, reused",
    "idle-iface": "as backend-streams, buffers as a CAI v3 naming an idle stream, batches tied to it",
    "backend-nvcomp": "GpuBackend._nvcomp, buffers from cp.asarray",
    "kvikio-staged": "as probe, after GpuBackend() and kvikio reads of the chunks",
    "backend-nvcomp-kvikio": "GpuBackend._nvcomp on buffers read by kvikio ",
    "pipeline": "from_zarr_gpu(path).persist() on 16 threads",
}


def case(path: str, name: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import cupy as cp
    import numpy as np
    from nvidia import nvcomp

    from zarr_dask_gpu.metadata import open_array_info
    from zarr_dask_gpu.plan import block_pieces
    from zarr_dask_gpu.storage import locate

    if name.startswith("pipeline"):
        from zarr_dask_gpu import from_zarr_gpu

        x = from_zarr_gpu(path, device="gpu")
        for _ in range(3):
            cp.get_default_memory_pool().free_all_blocks()
            t0 = time.perf_counter()
            y = x.persist(scheduler="threads", num_workers=16)
            cp.cuda.Device().synchronize()
            dt = time.perf_counter() - t0
            del y
        print(f"{name:22s} {dt * 1e3:7.1f} ms  {x.nbytes / dt / 1e9:5.1f} GB/s ({CASES[name]})", flush=True)
        os._exit(0)
    info = open_array_info(path)
    rows, cols = info.shape
    ranges = [
        locate(info, [p.coords for p in block_pieces((r, 0), (r + 64, cols), info.chunks)])
        for r in range(0, rows, 64)
    ]
    expected = 8 << 20
    if "kvikio" in name:
        from zarr_dask_gpu.gpu.backend import GpuBackend

        be = GpuBackend()
        staged = [be._reader.read(r, align=16) for r in ranges]
        bufs, offs, sizes = [s.buffer for s in staged], [s.offsets for s in staged], [s.sizes for s in staged]
    else:
        bufs, offs, sizes = [], [], []
        for rs in ranges:
            blobs = [open(r.path, "rb").read() for r in rs]  # noqa: SIM115
            o = np.cumsum([0, *[(len(b) + 15) // 16 * 16 for b in blobs]])
            host = np.zeros(int(o[-1]), np.uint8)
            for a, b in zip(o, blobs, strict=False):
                host[a : a + len(b)] = np.frombuffer(b, np.uint8)
            bufs.append(cp.asarray(host))
            offs.append(o[:-1])
            sizes.append(np.array([len(b) for b in blobs]))
    n = len(offs[0])
    if name in ("probe", "kvikio-staged"):
        streams = [cp.cuda.Stream(non_blocking=True) for _ in bufs]
        codecs = [
            nvcomp.Codec(
                algorithm="Zstd",
                bitstream_kind=nvcomp.BitstreamKind.RAW,
                cuda_stream=s.ptr,
                execution_policy=nvcomp.ExecutionPolicy.LATENCY,
            )
            for s in streams
        ]
    else:
        from zarr_dask_gpu.gpu.backend import GpuBackend

        be = GpuBackend()

    idle, cached = cp.cuda.Stream(non_blocking=True), {}

    class Wrapped:
        def __init__(self, a: cp.ndarray) -> None:
            self.a = a
            self.__cuda_array_interface__ = {
                "shape": (a.nbytes,),
                "typestr": "|u1",
                "data": (a.data.ptr, False),
                "version": 3,
                "stream": idle.ptr,
            }

    def one(k: int) -> None:
        starts, outs = np.arange(n) * expected, np.full(n, expected)
        if name in ("probe", "kvikio-staged"):
            s = streams[k]
            with s:
                out = cp.empty(n * expected, np.uint8)
                src = nvcomp.as_arrays(bufs[k], offs[k].tolist(), sizes[k].tolist(), cuda_stream=s.ptr)
                dst = nvcomp.as_arrays(out, starts.tolist(), outs.tolist(), cuda_stream=s.ptr)
                cfg = codecs[k].decompression_config(codecs[k].compression_config(outs.tolist()))
                codecs[k].decode(src, out=dst, decompression_config=cfg)
                ev = s.record()
                while not ev.done:
                    time.sleep(0.0002)
            return
        with be.context():
            out = cp.empty(n * expected, np.uint8)
            if name in ("backend-streams", "cached-config", "idle-iface"):
                s = be._stream()
                codec = be._codec("zstd", s)
                a, b, tied = bufs[k], out, s
                if name == "idle-iface":
                    a, b, tied = Wrapped(a), Wrapped(b), idle
                src = nvcomp.as_arrays(a, offs[k].tolist(), sizes[k].tolist(), cuda_stream=tied.ptr)
                dst = nvcomp.as_arrays(b, starts.tolist(), outs.tolist(), cuda_stream=tied.ptr)
                if name != "cached-config" or s.ptr not in cached:
                    cached[s.ptr] = codec.decompression_config(codec.compression_config(outs.tolist()))
                codec.decode(src, out=dst, decompression_config=cached[s.ptr])
            else:
                be._nvcomp("zstd", bufs[k], offs[k], sizes[k], [out], 0 * starts, starts, outs, True)

    with ThreadPoolExecutor(16) as ex:
        for _ in range(3):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            list(ex.map(one, range(len(bufs))))
            cp.cuda.Device().synchronize()
            dt = time.perf_counter() - t0
    print(f"{name:22s} {dt * 1e3:7.1f} ms  ({CASES[name]})", flush=True)
    os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--path", default="/tmp/bench-a.zarr")
    p.add_argument("--case")
    p.add_argument("--only", nargs="*", help="run these cases alone")
    args = p.parse_args()
    if args.case:
        return case(args.path, args.case)
    if not os.path.exists(args.path):
        from zarr_dask_gpu.sample import write_sample

        write_sample(args.path, 4 << 30, 8 << 20)
    for name in args.only or CASES:
        r = subprocess.run(
            [sys.executable, __file__, "--path", args.path, "--case", name],
            capture_output=True,
            text=True,
            timeout=100,
        )
        print(r.stdout.strip() or f"{name}: rc {r.returncode} {r.stderr[-400:]}", flush=True)


if __name__ == "__main__":
    main()
