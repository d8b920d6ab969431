"""The blosc unshuffle kernel (``gpu/kernels/blosc.cu``) alone, on the device: every block of a blosc
dataset's chunks (dataset E's by default: bit shuffle, float16) unshuffled in one launch, timed by CUDA
events against a device-to-device copy of the same bytes, for this source and the ``--compare`` ones
(another branch's ``blosc.cu``, its ``common.cuh`` beside it), whose outputs must match this source's.
The blocks hold random bytes: the kernel's work does not depend on them.
Run on the GPU host after `zarr-dask-gpu bench` (or `python3 -m zarr_dask_gpu.bench.datasets E`) wrote
the dataset:
    python3 benchmarks/probe_unshuffle.py [--path /tmp/bench-a.zarr-E] [--compare OTHER/blosc.cu ...]
"""

import argparse
from pathlib import Path

import cupy as cp
import numpy as np

from zarr_dask_gpu.bench import datasets
from zarr_dask_gpu.codecs.headers import blosc_layout
from zarr_dask_gpu.gpu import kernels

p = argparse.ArgumentParser()
p.add_argument("--path", default=datasets.path("E"))
p.add_argument("--compare", nargs="*", default=[], help="other blosc.cu sources, timed the same way")
p.add_argument("--repeat", type=int, default=10)
args = p.parse_args()

files = datasets.chunk_files(args.path)
heads = np.stack([np.frombuffer(Path(f).read_bytes()[:16], np.uint8) for f in files])
h = blosc_layout(heads)
# gpu/decoders/blosc.py's rule: byte shuffle (typesize > 1) wins over bit shuffle; copy-only frames have none
byte = ((h["flags"] & 1) > 0) & (h["typesize"] > 1)
mode = np.where(h["flags"] & 2, 0, np.where(byte, 1, np.where(h["flags"] & 4, 2, 0)))
chunk = int(h["nbytes"].max())
nb = h["nblocks"].astype(np.int64)
c = np.repeat(np.arange(len(files)), nb)
j = np.arange(len(c)) - np.repeat(np.cumsum(nb) - nb, nb)
bs = h["blocksize"][c].astype(np.int64)
start = c * chunk + j * bs
bsize = np.minimum(bs, h["nbytes"][c] - j * bs)
ts, md = h["typesize"][c].astype(np.int32), mode[c].astype(np.int32)
print(
    f"{args.path}: {len(files)} chunks, {len(c)} blocks of {int(bs[0])} bytes, typesize {int(ts[0])}, "
    f"mode {int(md[0])} (1 byte, 2 bit shuffle)",
    flush=True,
)
total = len(files) * chunk
src = cp.random.randint(0, 256, total, dtype=cp.uint8)
at, size = cp.asarray(start), cp.asarray(bsize)
ts_d, md_d = cp.asarray(ts), cp.asarray(md)


def timed(fn) -> float:  # type: ignore[no-untyped-def]
    """The median milliseconds of ``--repeat`` runs of ``fn`` on the current stream, after one untimed."""
    fn()
    times = []
    for _ in range(args.repeat):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(cp.cuda.get_elapsed_time(a, b))
    return float(np.median(times))


copy_out = cp.empty_like(src)
ms = timed(lambda: copy_out.__setitem__(slice(None), src))
print(f"device copy of {total / 1e9:.2f} GB: {ms:.2f} ms, {total / ms / 1e6:.0f} GB/s", flush=True)
sources = {"this source": kernels.CUDA} | {s: Path(s).parent for s in args.compare}
want = None
for title, folder in sources.items():
    fn = cp.RawModule(code=kernels.source("blosc.cu", folder)).get_function("unshuffle")
    out = cp.zeros_like(src)
    ms = timed(lambda fn=fn, out=out: fn((len(c),), (256,), (src, out, at, size, ts_d, md_d)))
    same = "" if want is None else ("; same bytes" if bool((out == want).all()) else "; DIFFERENT BYTES")
    want = out if want is None else want
    print(f"unshuffle, {title}: {ms:.2f} ms, {total / ms / 1e6:.0f} GB/s{same}", flush=True)
