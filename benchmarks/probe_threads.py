"""Probe: which concurrent use of nvCOMP and kvikio crashes (DESIGN.md saw segfaults with threads).

Each case runs in its own subprocess with a timeout, so a crash is a result, not the end of the run:
    python3 benchmarks/probe_threads.py
Cases: codecs created concurrently (no lock); codecs created under a lock then decoding concurrently
on their own streams; CuFile handles opened concurrently; open + read + decode per thread. The
``_keep`` variants keep every codec, stream and batch until the process ends (``os._exit``, as
the pipeline's registry does; the others drop the batches as soon as ``decode`` returns and the rest
when the thread's function returns); ``_unlocked`` creates the codecs without the lock;
``_teardown`` deletes the codec, then its stream, one per line (a crash report names the line),
``_stream_first`` the other way round.
"""

import concurrent.futures as cf
import contextlib
import faulthandler
import os
import subprocess
import sys
import tempfile
import threading

CASES = [
    ("create_codecs", 16),
    ("open_cufiles", 16),
    ("decode_prebuilt", 1),
    ("decode_prebuilt", 16),
    ("decode_prebuilt_teardown", 1),
    ("decode_prebuilt_teardown_stream_first", 1),
    ("decode_prebuilt_keep", 1),
    ("decode_prebuilt_keep", 16),
    ("decode_prebuilt_keep_unlocked", 16),
    ("open_read_decode_keep", 16),
]
_kept: list[object] = []


def case(name: str, threads: int) -> None:
    faulthandler.enable()  # a crash prints the Python line it happened on
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
            with contextlib.nullcontext() if "open_read_decode" in name or "unlocked" in name else lock:
                codec = make_codec(stream)
            src = cp.empty(n * len(frame), dtype=np.uint8)
            if name == "open_cufiles" or name.startswith("open_read_decode"):
                for i, p in enumerate(paths):
                    with kvikio.CuFile(p, "r") as f:
                        f.pread(src[i * len(frame) : (i + 1) * len(frame)], len(frame), 0).get()
                if name == "open_cufiles":
                    return True
            else:
                src.set(np.frombuffer(frame * n, dtype=np.uint8))
            out = cp.empty(n * ch, dtype=np.uint8)
            src_b = nvcomp.as_arrays(src, [i * len(frame) for i in range(n)], [len(frame)] * n)
            out_b = nvcomp.as_arrays(out, [i * ch for i in range(n)], [ch] * n)
            res = codec.decode(src_b, out=out_b)
            if "keep" not in name:
                del src_b, out_b  # dropped while the decode may still run
            res.buffer_sizes  # noqa: B018 (waits)
            ok = bytes(out[:ch].get()) == raw
            if "keep" in name:
                with lock:
                    _kept.extend([codec, stream, res, out, src, src_b, out_b])
            if "teardown" in name:
                del res
                del out, src
                stream.synchronize()
        if "stream_first" in name:  # the codec outlives its stream
            del stream
            del codec
        elif "teardown" in name:
            del codec
            del stream
        return ok

    with cf.ThreadPoolExecutor(threads) as ex:
        ok = list(ex.map(work, range(threads)))
    print(f"ok={all(ok)}", flush=True)
    if "keep" in name:
        os._exit(0)


def main() -> None:
    for name, threads in CASES:
        try:
            p = subprocess.run(
                [sys.executable, __file__, "--case", name, "--threads", str(threads)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            where = [ln.strip() for ln in p.stderr.splitlines() if ln.strip().startswith("File")][:2]
            verdict = f"rc={p.returncode} {p.stdout.strip()} {' <- '.join(where)}"
        except subprocess.TimeoutExpired:
            verdict = "HUNG (60 s)"
        print(f"{name:18s} {threads} threads: {verdict}", flush=True)


if __name__ == "__main__":
    if "--case" in sys.argv:
        case(sys.argv[sys.argv.index("--case") + 1], int(sys.argv[sys.argv.index("--threads") + 1]))
    else:
        main()
