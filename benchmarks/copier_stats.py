"""What the zstd frame copier (``gpu/kernels/zstd.cu``, a thread block a frame, ``ZS_STEP`` sequences a step)
meets on a dataset's chunks, counted by the source's host build, no GPU needed:

    python3 benchmarks/copier_stats.py [--datasets A,E,Ez] [--gib 0.25]

Writes each dataset small (``zarr_dask_gpu.bench.datasets``), decodes two of its chunks (E: 512 of its
inner blosc streams) with counters compiled in, checks the bytes against numcodecs, and prints per
decoded byte: the bytes deferred (their source lies inside their step), those past the deferred
list's room (chased in place by their lane), and the chase's hops (each a search of the step's
sequences), with how far back each hop lands.
"""

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from numcodecs import Zstd

from zarr_dask_gpu.bench import ceilings, datasets
from zarr_dask_gpu.gpu import kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: its host test harness
from tests.codecs.test_zstd_c import decode as host_decode

# counters: deferred, past the list, hops, hops within 3 sequences back, in its own, over 15 back, steps
COUNTERS = 7
EDITS = (  # regular expressions and their replacements
    (
        r"    if \(k >= ZS_DEFER\) return 0;",
        r"    zs_stats[0]++;\n    if (k >= ZS_DEFER) { zs_stats[1]++; return 0; }",
    ),
    (  # the chase's hop, by whichever search the source uses
        r"        j = (zs_find\w*)\(s, j, q\);\n",
        r"        { int j2 = \1(s, j, q); zs_stats[2]++; zs_stats[3] += j - j2 <= 3;\n"
        r"          zs_stats[4] += j == j2; zs_stats[5] += j - j2 > 15; j = j2; }\n",
    ),
    (
        r"(            s\.ostart\[s\.n\] = e;\n            s\.ndefer = 0;\n)",
        r"\1            zs_stats[6]++;\n",
    ),
)


def build(where: str) -> ctypes.CDLL:
    """The host build of zstd.cu with the counters."""
    src = (kernels.CUDA / "zstd.cu").read_text()
    for old, new in EDITS:
        src, found = re.subn(old, new, src)
        assert found == 1, f"not once in zstd.cu: {old!r}"
    cu = os.path.join(where, "zstd.cu")
    with open(cu, "w") as f:
        f.write(f"long long zs_stats[{COUNTERS}];\n" + src)
    shutil.copy(kernels.CUDA / "common.cuh", where)
    so = os.path.join(where, "zs.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-x", "c", "-o", so, cu], check=True)
    return ctypes.CDLL(so)


def count(lib: ctypes.CDLL, frames: list[bytes]) -> tuple[list[int], int]:
    """The counters over one batch of ``frames`` by the frame copier (the host tests' ``decode``), and
    their decoded bytes."""
    stats = (ctypes.c_longlong * COUNTERS).in_dll(lib, "zs_stats")
    for k in range(COUNTERS):
        stats[k] = 0
    want = [bytes(Zstd().decode(f)) for f in frames]
    status, got = host_decode(lib, frames, [len(w) for w in want], verify=False)
    assert not status.any(), status
    assert got == want, "bytes differ from libzstd's"
    return list(stats), sum(len(w) for w in want)


def frames_of(name: str, base: str, gib: float) -> list[bytes]:
    """Two chunks of dataset ``name``, written small; for a blosc dataset 512 of its inner streams."""
    datasets.write(name, base=base, gib=gib)
    files = datasets.chunk_files(datasets.path(name, base))[:2]
    chunks = [Path(f).read_bytes() for f in files]
    if not chunks[0].startswith(b"\x28\xb5\x2f\xfd"):  # blosc frames: their inner zstd streams
        offs, sizes, _ = ceilings.blosc_streams(chunks[0])
        return [chunks[0][o : o + s] for o, s in zip(offs.tolist(), sizes.tolist(), strict=True)][:512]
    return chunks


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", default="A,E,Ez")
    p.add_argument("--gib", type=float, default=0.25, help="each dataset's size as written here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as where:
        lib = build(where)
        for name in args.datasets.split(","):
            frames = frames_of(name, os.path.join(where, "a.zarr"), args.gib)
            (deferred, past, hops, near, own, far, steps), total = count(lib, frames)
            print(
                f"{name}: {len(frames)} frames, {total / 2**20:.1f} MiB, "
                f"{total / max(steps, 1):.0f} bytes a step; "
                f"a byte: deferred {deferred / total:.3f}, past the list {past / total:.3f}, "
                f"hops {hops / total:.3f} (of the hops: in its own sequence {own / max(hops, 1):.2f}, "
                f"within 3 back {near / max(hops, 1):.2f}, over 15 back {far / max(hops, 1):.2f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
