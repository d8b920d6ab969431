"""Probe of nvCOMP 6 behaviour on damaged input, one subprocess per case with a timeout.

Run on the GPU host: python3 benchmarks/probe_nvcomp.py  (prints one line per case).
"""

import concurrent.futures as cf
import subprocess
import sys

CODECS = ["zstd", "gzip", "deflate", "lz4"]
DAMAGE = ["good", "trunc_half", "trunc_1", "garbage", "empty", "flip_mid", "too_large", "too_small"]


def case(codec: str, damage: str) -> None:
    import cupy as cp
    import numpy as np
    from numcodecs import LZ4, GZip, Zlib, Zstd
    from nvidia import nvcomp

    n, ch = 8, 1 << 20
    rng = np.random.default_rng(0)
    raw = [np.round(rng.standard_normal(ch // 4), 2).astype("<f4").tobytes() for _ in range(n)]
    c, algo, skip, trail = {
        "zstd": (Zstd(level=1), "Zstd", 0, 0),
        "gzip": (GZip(level=1), "Gzip", 0, 0),
        "deflate": (Zlib(level=1), "Deflate", 2, 4),
        "lz4": (LZ4(), "LZ4", 4, 0),
    }[codec]
    frames = [bytes(c.encode(r)) for r in raw]
    k = 3
    f = frames[k]
    if damage == "trunc_half":
        frames[k] = f[: len(f) // 2]
    elif damage == "trunc_1":
        frames[k] = f[: len(f) - 1 - trail]
    elif damage == "garbage":
        frames[k] = bytes(rng.integers(0, 256, len(f), dtype=np.uint8))
    elif damage == "empty":
        frames[k] = f[: skip + trail]
    elif damage == "flip_mid":
        b = bytearray(f)
        m = len(b) // 2
        b[m : m + 64] = bytes(x ^ 0x5A for x in b[m : m + 64])
        frames[k] = bytes(b)
    elif damage == "too_large":
        frames[k] = bytes(c.encode(raw[0] + raw[1]))
    elif damage == "too_small":
        frames[k] = bytes(c.encode(raw[0][: ch // 2]))

    def run(frames):
        codec_ = nvcomp.Codec(algorithm=algo, bitstream_kind=nvcomp.BitstreamKind.RAW)
        sizes = [max(len(x) - skip - trail, 0) for x in frames]
        host = bytearray()
        offs = []
        for x in frames:  # payload start 16-byte aligned
            pad = (-(len(host) + skip)) % 16
            host += bytes(pad)
            offs.append(len(host) + skip)
            host += x
        dev = cp.asarray(np.frombuffer(bytes(host), dtype=np.uint8))
        src = nvcomp.as_arrays(dev, offs, sizes)
        out = cp.full(n * ch, 0xAB, dtype=np.uint8)
        dst = nvcomp.as_arrays(out, [i * ch for i in range(n)], [ch] * n)
        kw = {}
        if MODE == "cfg":
            kw["decompression_config"] = codec_.decompression_config(codec_.compression_config([ch] * n))
        res = codec_.decode(src, out=dst, **kw)
        cp.cuda.runtime.deviceSynchronize()
        ok = [bytes(out[i * ch : (i + 1) * ch].get()) == raw[i] for i in range(n)]
        return ok, list(res.buffer_sizes)[k]

    try:
        print("ok/res.buffer_sizes/dst.buffer_sizes/len(res[k])", run(frames))
    except Exception as e:
        print(f"RAISED {type(e).__name__}: {str(e)[:200]}")
        try:
            good = [bytes(c.encode(r)) for r in raw]
            print("after error, good batch:", all(run(good)[0]))
        except Exception as e2:
            print(f"after error RAISED {type(e2).__name__}: {str(e2)[:200]}")


def tensorstore_case() -> None:
    import os
    import tempfile

    import cupy as cp
    import numpy as np
    import tensorstore as ts
    from nvidia import nvcomp

    n, ch = 4, 1 << 20
    arr = np.round(np.random.default_rng(1).standard_normal((n, ch // 4)), 2).astype("<f4")
    d = tempfile.mkdtemp()
    meta = {
        "shape": list(arr.shape),
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, ch // 4]}},
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 1}},
        ],
    }
    t = ts.open(
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": d}, "metadata": meta, "create": True}
    ).result()
    t.write(arr).result()
    frames = [open(os.path.join(d, "c", str(i), "0"), "rb").read() for i in range(n)]  # noqa: SIM115
    print("frame header", frames[0][:6].hex())
    codec_ = nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW)
    offs = np.cumsum([0] + [len(x) for x in frames])[:-1]
    dev = cp.asarray(np.frombuffer(b"".join(frames), dtype=np.uint8))
    src = nvcomp.as_arrays(dev, [int(o) for o in offs], [len(x) for x in frames])
    out = cp.zeros(n * ch, dtype=np.uint8)
    dst = nvcomp.as_arrays(out, [i * ch for i in range(n)], [ch] * n)
    res = codec_.decode(src, out=dst)
    cp.cuda.runtime.deviceSynchronize()
    print("tensorstore ok", bytes(out.get()) == arr.tobytes(), list(res.buffer_sizes))


if __name__ == "__main__":
    if len(sys.argv) == 4:
        MODE = sys.argv[3]
        case(sys.argv[1], sys.argv[2])
    elif len(sys.argv) == 2:
        tensorstore_case()
    else:
        jobs = [(c, d, m) for m in ("cfg", "plain") for c in CODECS for d in DAMAGE]

        def go(args):
            try:
                p = subprocess.run(
                    [sys.executable, __file__, *args], capture_output=True, text=True, timeout=25
                )
                return args, (p.stdout + p.stderr[-300:]).strip().replace("\n", " | ")
            except subprocess.TimeoutExpired:
                return args, "HUNG (no result in 25 s)"

        with cf.ThreadPoolExecutor(8) as ex:
            for args, msg in ex.map(go, jobs):
                print(" ".join(args), "->", msg, flush=True)
