"""Does nvCOMP 6.0's LZ4 decode (C API, as the pipeline calls it) stay safe on damaged bare lz4
blocks, as blosc stores them? Each case puts one damaged block among seven good ones and decodes
the batch with statuses and decoded sizes read back: "caught" when that block has a failing status
or a wrong size and the good ones decode exactly; "missed" otherwise. A hang or a fault ends the
process (run it under `timeout`), and the step reports what printed before.

    timeout 120 python3 benchmarks/probe_lz4_damage.py
"""

import time

import cupy as cp
import numpy as np
from numcodecs import LZ4

from zarr_dask_gpu.gpu.decoders import decompress

N, SIZE, K = 8, 64 << 10, 3


def blocks(rng: np.random.Generator) -> tuple[list[bytes], list[bytes]]:
    raw = [np.round(rng.standard_normal(SIZE // 4) * 10, 1).astype("<f4").tobytes() for _ in range(N)]
    return raw, [bytes(LZ4().encode(r))[4:] for r in raw]  # numcodecs' 4-byte size prefix off


def damaged(kind: str, rng: np.random.Generator, good: bytes, raw: bytes) -> bytes:
    n = len(good)
    if kind == "truncated":
        return good[: int(rng.integers(1, n))]
    if kind == "garbage":
        return rng.integers(0, 256, n, dtype=np.uint8).tobytes()
    if kind == "flipped":
        b = bytearray(good)
        at = int(rng.integers(0, n - 64))
        b[at : at + 64] = bytes(x ^ int(rng.integers(1, 256)) for x in b[at : at + 64])
        return bytes(b)
    if kind == "empty":
        return b""
    if kind == "too large":
        return bytes(LZ4().encode(raw + raw))[4:]
    if kind == "too small":
        return bytes(LZ4().encode(raw[: len(raw) // 2]))[4:]
    raise ValueError(kind)


def run(frames: list[bytes]) -> tuple[list[tuple[int, str]], cp.ndarray]:
    sizes = np.array([len(f) for f in frames], dtype=np.int64)
    offs = np.cumsum([0, *((sizes + 15) // 16 * 16)])[:-1]
    host = np.zeros(int(offs[-1] + max(sizes[-1], 1)) + 16, dtype=np.uint8)
    for o, f in zip(offs, frames, strict=True):
        host[o : o + len(f)] = np.frombuffer(f, dtype=np.uint8)
    comp, out = cp.asarray(host), cp.zeros(N * SIZE, dtype=np.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        done = decompress.launch(
            "lz4",
            np.uint64(comp.data.ptr) + offs.astype(np.uint64),
            sizes,
            np.uint64(out.data.ptr) + np.arange(N, dtype=np.uint64) * np.uint64(SIZE),
            np.full(N, SIZE),
            stream,
        )
        stream.synchronize()
    return done.failures(), out


def main() -> None:
    tally: dict[str, list[int]] = {}
    for kind in ("truncated", "garbage", "flipped", "empty", "too large", "too small"):
        for seed in range(20 if kind in ("truncated", "garbage", "flipped") else 1):
            rng = np.random.default_rng(seed)
            raw, frames = blocks(rng)
            frames[K] = damaged(kind, rng, frames[K], raw[K])
            t0 = time.perf_counter()
            bad, out = run(frames)
            others = all(bytes(out[i * SIZE : (i + 1) * SIZE].get()) == raw[i] for i in range(N) if i != K)
            caught = [i for i, _ in bad] == [K] and others
            tally.setdefault(kind, [0, 0])[0 if caught else 1] += 1
            if not caught:
                print(f"{kind} seed {seed}: missed; failures {bad}, good blocks exact: {others}", flush=True)
            print(
                f"{kind} seed {seed}: {'caught' if caught else 'MISSED'} in {time.perf_counter() - t0:.3f} s",
                flush=True,
            )
    for kind, (c, m) in tally.items():
        print(f"{kind:10s}: caught {c}, missed {m}")


if __name__ == "__main__":
    main()
