"""This package's zstd kernels (``gpu/kernels/zstd.cu``) against nvCOMP on dataset A's chunks, on the device:
one batch of every chunk and of a task's 32, by the batch's rules and with each copier forced
(``zstd_blocks.copier``: a thread block a frame, by waves, a warp a frame; ``--copiers`` picks), each
kernel's time (``zstd_blocks.kernel_times``: CUDA events), values checked against numcodecs; then
variants of the source with parts of the work taken out, and other sources (``--compare``, say another
branch's), timed the same way (``zstd_blocks.compiled_from``), the other sources' values checked too.
Run on the GPU host after `zarr-dask-gpu bench` wrote dataset A:
    python3 benchmarks/probe_zstd.py [--path /tmp/bench-a.zarr] [--chunks 512] [--compare OTHER.cu ...]
With ``--blosc`` the frames are a blosc store's inner zstd streams (dataset E: ``--path
/tmp/bench-a.zarr-E --blosc --chunks 65536``). With ``--once`` it decodes one batch of ``--chunks`` by
the rule, once, checked, and stops: for a profiler (the ``ncu`` step of ``scripts/gpu_check.sh``). With
``--no-variants`` it stops after the rules and the forced copiers; ``--variants REGEX`` times only the
variants whose titles it finds.
"""

import argparse
import contextlib
import os
import re
from pathlib import Path

import cupy as cp
import numpy as np
from numcodecs import Zstd

from zarr_dask_gpu.bench import ceilings, datasets
from zarr_dask_gpu.bench.timing import settings, timed
from zarr_dask_gpu.gpu import kernels
from zarr_dask_gpu.gpu.decoders import decompress, zstd_blocks
from zarr_dask_gpu.gpu.runtime.sync import wait

p = argparse.ArgumentParser()
p.add_argument("--path", default=datasets.DEFAULT_PATH)
p.add_argument("--chunks", type=int, default=512, help="chunks of a batch (the store's, in turn)")
p.add_argument("--compare", nargs="*", default=[], help="other zstd.cu sources, timed the same way")
p.add_argument(
    "--blosc", action="store_true", help="the store's chunks are blosc frames: time their inner zstd streams"
)
p.add_argument("--once", action="store_true", help="one checked decode of --chunks, for a profiler")
p.add_argument("--copiers", default=",".join(zstd_blocks.COPIERS), help="the copiers to force, in turn")
p.add_argument("--variants", default="", help="a regular expression: the variants whose titles it finds")
p.add_argument(
    "--no-variants",
    action="store_true",
    help="the rules and the forced copiers only: no variant sources",
)
args = p.parse_args()


def units(files: list[str]) -> list[bytes]:
    """The zstd frames to decode: the chunk files, or with ``--blosc`` their compressed inner streams
    (``ceilings.blosc_streams``; each a zstd frame of the frame's block size)."""
    if not args.blosc:
        return [Path(f).read_bytes() for f in files]
    out = []
    for f in files:
        frame = Path(f).read_bytes()
        offs, sizes, _ = ceilings.blosc_streams(frame)
        out += [frame[o : o + n] for o, n in zip(offs.tolist(), sizes.tolist(), strict=True)]
    return out


found = units(datasets.chunk_files(args.path))
blobs = [found[i % len(found)] for i in range(args.chunks)]  # past the last chunk, round again
nbytes = len(bytes(Zstd().decode(blobs[0])))
assert all(len(bytes(Zstd().decode(b))) == nbytes for b in blobs[:: max(len(blobs) // 64, 1)]), "sizes differ"
batches = sorted({min(32, len(blobs)), len(blobs)})  # a task's 32 chunks, and all
starts = np.cumsum([0, *[-(-len(b) // 16) * 16 for b in blobs]])
host = np.zeros(int(starts[-1]), np.uint8)
for s, b in zip(starts[:-1], blobs, strict=True):
    host[s : s + len(b)] = np.frombuffer(b, np.uint8)
comp = cp.asarray(host)
out = cp.empty(nbytes * len(blobs), np.uint8)
stream = cp.cuda.Stream(non_blocking=True)
print(
    f"{len(blobs)} zstd frames of {nbytes / 2**20:.3f} MiB, {host.nbytes / 1e9:.2f} GB compressed", flush=True
)


def decode(n: int, decoder: str) -> None:
    src = np.uint64(comp.data.ptr) + starts[:n].astype(np.uint64)
    dst = np.uint64(out.data.ptr) + np.arange(n, dtype=np.uint64) * np.uint64(nbytes)
    sizes = np.array([len(b) for b in blobs[:n]], np.uint64)
    with stream, settings({"zstd-decoder": decoder}):
        done = decompress.launch("zstd", src, sizes, dst, np.full(n, nbytes, np.uint64), stream)
        wait(stream)
        assert not done.failures(), done.failures()[:3]


def summed(launches: list[tuple[str, float]]) -> str:
    ms: dict[str, float] = {}
    for k, t in launches:  # the waves: one entry, their count beside it
        ms[k] = ms.get(k, 0.0) + t
    waves = sum(k == "zs_wave" for k, _ in launches)
    return ", ".join(
        f"{k} {t:.1f} ms" + (f" ({waves} waves)" if k == "zs_wave" else "") for k, t in ms.items()
    )


def check(n: int, label: str) -> None:
    for i in (0, n // 2, n - 1):
        want = np.frombuffer(Zstd().decode(blobs[i]), np.uint8)
        assert np.array_equal(out[i * nbytes : (i + 1) * nbytes].get(), want), (label, i)


if args.once:
    decode(len(blobs), "blocks")
    check(len(blobs), "once")
    raise SystemExit(0)
forcings = [(c, zstd_blocks.copier) for c in args.copiers.split(",") if c]
for n in batches:
    # the kernels by the batch's rules, then with each copier forced
    for decoder, by, force in (
        ("nvcomp", None, None),
        ("blocks", None, None),
        *(("blocks", *f) for f in forcings),
    ):
        with force(by) if force else contextlib.nullcontext():
            out.fill(0)
            decode(n, decoder)
            check(n, f"{decoder} {by}")
            best = timed(lambda n=n, decoder=decoder: decode(n, decoder), 3, pick=min)
            print(
                f"{decoder:7s} {by or 'rule':6s} {n:4d} chunks: {best * 1e3:7.1f} ms "
                f"({n * nbytes / best / 1e9:6.2f} GB/s)",
                flush=True,
            )
            if decoder == "blocks":
                with zstd_blocks.kernel_times() as launches:
                    decode(n, "blocks")
                print("   " + summed(launches), flush=True)
print("zs_count + read-back and scratch are the rest of the blocks decoder's time")
if args.no_variants:
    raise SystemExit(0)

# where the copier's time goes: the same source with parts of its byte work taken out (values wrong)
source = zstd_blocks.source()
variants = {
    "no gathers (sources found, not read)": [
        (
            "for (int u = 0; u < 8; u++) v[u] = *from[u];",
            "for (int u = 0; u < 8; u++) v[u] = (u8)(size_t)from[u];",
        )
    ],
    "no byte work (scans and barriers only)": [("if (p0 < p1) zs_put(", "if (p0 < 0) zs_put(")],
    "no stores (values folded into one)": [
        (
            "            if (p + u < p1) at[p + u] = v[u];",
            "            if (p + u < p1 && v[u] == 0xA5 && p == 0xFFFFF) at[p + u] = v[u];",
        )
    ],
    "no modulo (the overlap case read wrong)": [
        ("int o = s->off[j], q = p - m < o ? p - o : m - o + (p - m) % o;", "int o = s->off[j], q = p - o;")
    ],
    "sequences: no stores": [
        (
            "out[k] = (u64)ll | ((u64)ml << 18) | ((u64)off << 36);",
            "if (k == r->nseq - 1) out[k] = (u64)ll | ((u64)ml << 18) | ((u64)off << 36);",
        )
    ],
}
for step in (128, 256, 512, 1024):  # the frame copier's steps (its thread block: compiled_from follows)
    variants[f"copier steps of {step} sequences"] = [(source, f"#define ZS_STEP {step}\n" + source)]
for blocks in (5, 6):  # the frame copier at more thread blocks an SM than its registers allow (4)
    variants[f"copier at {blocks} thread blocks an SM (launch bounds)"] = [
        ("__global__ void zs_copy(", f"__global__ void __launch_bounds__(ZS_STEP, {blocks}) zs_copy(")
    ]
for other in args.compare:  # whole sources, e.g. another branch's, timed beside this one's and checked
    variants[f"source {other}"] = [(source, kernels.source(Path(other).name, Path(other).parent))]
checked = {f"source {other}" for other in args.compare}


def signatures(code: str) -> dict[str, str]:
    """Each kernel's parameter list, by name: the launchers pass this source's."""
    found = re.findall(r"__global__[^{;]*\)", re.sub(r"__launch_bounds__\([^)]*\)", "", code))
    return {re.findall(r"(\w+)\s*\(", k)[0]: " ".join(k.split()) for k in found}


mine = signatures(source)


for title, edits in variants.items():
    if not re.search(args.variants, title):
        continue
    changed = source
    for old, new in edits:
        changed = changed.replace(old, new)
    if changed == source:
        print(f"{title}: not in this source, skipped", flush=True)
        continue
    theirs = signatures(changed)
    if any(mine.get(k) != v for k, v in theirs.items()) or set(mine) - set(theirs):
        print(f"{title}: its kernels take other arguments than this source's, skipped", flush=True)
        continue
    with zstd_blocks.compiled_from(changed):
        for n in batches:
            t = float("nan")
            out.fill(0)  # what the source writes, not an earlier one's
            with zstd_blocks.kernel_times() as launches, contextlib.suppress(AssertionError):
                decode(n, "blocks")  # compiles the module at the first launch
                t = timed(lambda n=n: decode(n, "blocks"), 3, pick=min)  # as the rules above
            ms = dict(launches)  # each kernel's last launch: the timed pass's
            if title in checked:  # a whole source decodes as libzstd does; the parts taken out do not
                try:
                    check(n, title)
                    print(f"{title}, {n} chunks: values equal libzstd's", flush=True)
                except AssertionError as e:
                    print(f"{title}, {n} chunks: values differ from libzstd's at {e}", flush=True)
            print(
                f"{title}, {n} chunks: {t * 1e3:.1f} ms, zs_copy {ms.get('zs_copy', float('nan')):.1f} ms "
                f"(zs_sequences {ms.get('zs_sequences', float('nan')):.1f} ms)",
                flush=True,
            )
print(f"pid {os.getpid()} done")
