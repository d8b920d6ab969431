"""Probe: does an nvCOMP 6 batched zstd decode block its caller, and do decodes on two streams overlap?

Run on the GPU host: python3 benchmarks/probe_streams.py
"""

import threading
import time

import cupy as cp
import numpy as np
from numcodecs import Zstd
from nvidia import nvcomp

n, ch = 32, 8 << 20
t = np.linspace(0, 40 * np.pi, ch // 4, dtype=np.float32)
rng = np.random.default_rng(0)
raw = [np.round(np.sin(t + i) * 10 + rng.standard_normal(ch // 4, dtype=np.float32), 1) for i in range(n)]
frames = [bytes(Zstd(level=0).encode(r)) for r in raw]
offs = np.cumsum([0, *[(len(f) + 15) // 16 * 16 for f in frames]])
host = np.zeros(int(offs[-1]), np.uint8)
for o, f in zip(offs, frames, strict=False):
    host[o : o + len(f)] = np.frombuffer(f, np.uint8)
comp = cp.asarray(host)


def setup(stream):
    codec = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, cuda_stream=stream.ptr)
    out = cp.empty(n * ch, np.uint8)
    src = nvcomp.as_arrays(
        comp, [int(o) for o in offs[:-1]], [len(f) for f in frames], cuda_stream=stream.ptr
    )
    dst = nvcomp.as_arrays(out, list(range(0, n * ch, ch)), [ch] * n, cuda_stream=stream.ptr)
    cfg = codec.decompression_config(codec.compression_config([ch] * n))
    return codec, src, dst, cfg


streams = [cp.cuda.Stream(non_blocking=True) for _ in range(4)]
ctx = [setup(s) for s in streams]
for mode in ("cfg", "plain"):

    def dec(i, mode=mode):
        codec, src, dst, cfg = ctx[i]
        with streams[i]:
            if mode == "cfg":
                codec.decode(src, out=dst, decompression_config=cfg)
            else:
                codec.decode(src, out=dst)

    for i in range(4):
        dec(i)
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    dec(0)
    t_call = time.perf_counter() - t0
    streams[0].synchronize()
    t_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(4):
        dec(i)
    cp.cuda.Device().synchronize()
    t_four_one_thread = time.perf_counter() - t0
    t0 = time.perf_counter()
    th = [threading.Thread(target=dec, args=(i,)) for i in range(4)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    cp.cuda.Device().synchronize()
    t_four_threads = time.perf_counter() - t0
    print(
        f"{mode}: decode() returned after {t_call * 1e3:.1f} ms; one batch {t_one * 1e3:.0f} ms; "
        f"4 batches on 4 streams, one thread {t_four_one_thread * 1e3:.0f} ms; "
        f"4 threads {t_four_threads * 1e3:.0f} ms",
        flush=True,
    )
