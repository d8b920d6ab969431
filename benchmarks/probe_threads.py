"""Probe: which concurrent use of nvCOMP and kvikio crashes (DESIGN.md saw segfaults with threads).

Each case runs in its own subprocess with a timeout, so a crash is a result, not the end of the run:
    python3 benchmarks/probe_threads.py [--threads 16]
Cases: codecs created concurrently (no lock); codecs created under a lock then decoding concurrently
on their own streams; CuFile handles opened concurrently; open + read + decode per thread.
"""

import concurrent.futures as cf
import contextlib
import subprocess
import sys
import tempfile
import threading

CASES = ["create_codecs", "decode_prebuilt", "open_cufiles", "open_read_decode"]


def case(name: str, threads: int) -> None:
    import cupy as cp
    import kvikio
    import numpy as np
    from numcodecs import Zstd
    from nvidia import nvcomp

    n, ch = 8, 1 << 20
    raw = np.round(np.random.default_rng(0).standard_normal(ch // 4), 1).astype("f4").tobytes()
    frame = bytes(Zstd(level=1).encode(raw))
    d = tempfile.mkdtemp()
    paths = []
    for i in range(n):
        paths.append(f"{d}/{i}")
        with open(paths[-1], "wb") as f:
            f.write(frame)
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def make_codec(stream: cp.cuda.Stream) -> nvcomp.Codec:
        return nvcomp.Codec(algorithm="Zstd", bitstream_kind=nvcomp.BitstreamKind.RAW, cuda_stream=stream.ptr)

    def work(t: int) -> bool:
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            barrier.wait()
            if name == "create_codecs":
                make_codec(stream)
                return True
            with lock if name != "open_read_decode" else contextlib.nullcontext():
                codec = make_codec(stream)
            src = cp.empty(n * len(frame), dtype=np.uint8)
            if name in ("open_cufiles", "open_read_decode"):
                for i, p in enumerate(paths):
                    with kvikio.CuFile(p, "r") as f:
                        f.pread(src[i * len(frame) : (i + 1) * len(frame)], len(frame), 0).get()
                if name == "open_cufiles":
                    return True
            else:
                src.set(np.frombuffer(frame * n, dtype=np.uint8))
            out = cp.empty(n * ch, dtype=np.uint8)
            res = codec.decode(
                nvcomp.as_arrays(src, [i * len(frame) for i in range(n)], [len(frame)] * n),
                out=nvcomp.as_arrays(out, [i * ch for i in range(n)], [ch] * n),
            )
            res.buffer_sizes  # noqa: B018 (waits)
            return bytes(out[:ch].get()) == raw

    with cf.ThreadPoolExecutor(threads) as ex:
        ok = list(ex.map(work, range(threads)))
    print(f"ok={all(ok)}")


def main() -> None:
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 16
    for name in CASES:
        try:
            p = subprocess.run(
                [sys.executable, __file__, "--case", name, "--threads", str(threads)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            verdict = f"rc={p.returncode} {p.stdout.strip()} {p.stderr.strip()[-200:]}"
        except subprocess.TimeoutExpired:
            verdict = "HUNG (60 s)"
        print(f"{name:18s} {threads} threads: {verdict}", flush=True)


if __name__ == "__main__":
    if "--case" in sys.argv:
        case(sys.argv[sys.argv.index("--case") + 1], int(sys.argv[sys.argv.index("--threads") + 1]))
    else:
        main()
