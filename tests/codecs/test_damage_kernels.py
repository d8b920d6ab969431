"""The damage corpus (tests/damage.py) through this package's kernels compiled for the host with
AddressSanitizer: the zstd decoder (``gpu/kernels/zstd.cu``) on every zstd chunk, the lz4 walk that guards
nvCOMP on every lz4 chunk, and the blosc stream-table kernel on every blosc chunk whose header the
host check passes. No read or write leaves its buffer whatever the bytes; a chunk the zstd kernels
accept decodes to libzstd's bytes; an lz4 stream the walk passes is one liblz4 decodes to its size.
What the kernels refuse, the GPU pipeline hands to the reference library (gpu/backend.py ``_rescue``),
which the gpu-marked tests/codecs/test_damage.py checks on the GPU."""

import json
import os
import subprocess
import sys

import pytest

from zarr_dask_gpu.gpu.kernels import shared

from .test_kernels_c import _asan, build_kernels
from .test_zstd_c import SOURCE

pytestmark = pytest.mark.skipif(_asan() is None, reason="needs a C compiler with AddressSanitizer")

SCRIPT = r"""
import ctypes, json, sys
import numpy as np
sys.path.insert(0, {root!r})
from tests import damage
from tests.codecs import test_zstd_c as tz
from zarr_dask_gpu.codecs import headers

zs, k = ctypes.CDLL({zs!r}), ctypes.CDLL({k!r})
p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
counts = {{}}
def count(key):
    counts[key] = counts.get(key, 0) + 1

for case in damage.corpus(0, "ci"):
    want = damage.reference(case)
    if case.codec == "zstd" and case.data:
        (st,), (got,) = tz.decode(zs, [case.data], [case.size])
        for copier in ("waves", "warps"):
            (st_c,), (got_c,) = tz.decode(zs, [case.data], [case.size], copier=copier)
            assert st_c == st and (st != 0 or got_c == got), ("the copiers differ", copier, case.label)
        if st == 0:
            count("zstd accepted")
            assert got == want, ("zstd kernels accepted what libzstd does not decode alike", case.label)
        else:
            count("zstd refused, libzstd decodes" if want is not None else "zstd refused")
    elif case.codec == "lz4" and len(case.data) > 4:
        buf = np.frombuffer(case.data + bytes(16), np.uint8).copy()
        claimed = np.zeros(1, np.int64)
        st = k.lz4_item(ctypes.c_void_p(buf.ctypes.data), ctypes.c_longlong(len(case.data)), ctypes.c_int(4),
                        ctypes.c_longlong(case.size), ctypes.c_void_p(0), p(claimed))
        count("lz4 passed" if st == 0 else "lz4 stopped")
        assert st != 0 or want is not None, ("the lz4 walk passed what liblz4 refuses", case.label)
    elif case.codec.startswith("blosc") and headers.check_blosc_frame(case.data, case.size) is None:
        buf = np.frombuffer(case.data, np.uint8).copy()  # exactly the chunk: any overrun is seen
        h = headers.blosc_layout(buf[None, :16])
        rows = int(h["rows"][0])
        table = [np.zeros(max(rows, 1), np.int64) for _ in range(4)]
        zero = np.zeros(1, np.int64)
        sizes = h["ctbytes"].astype(np.int64)
        st = 0
        walked = 1 if h["flags"][0] & 2 else int(h["nblocks"][0])  # as gpu/decoders/blosc.py launches them
        for j in range(walked):  # a thread a block; the frame fails where one does
            st = st or k.streams_item(ctypes.c_longlong(0), ctypes.c_longlong(j), p(buf), p(zero), p(sizes),
                                      p(zero), p(zero), *map(p, table))
        count("blosc table sound" if st == 0 else "blosc table refused")
print(json.dumps(counts))
"""


def test_the_corpus_stays_in_bounds_and_agrees(tmp_path):
    asan = _asan()
    zs, k = tmp_path / "zs.so", tmp_path / "k.so"
    asan_flags = ["-g", "-fsanitize=address", "-fno-omit-frame-pointer"]
    flags = ["-O1", *asan_flags, "-shared", "-fPIC"]
    subprocess.run(
        ["cc", *flags, *shared.flags("zstd.cu"), "-x", "c", "-o", str(zs), str(SOURCE)], check=True
    )
    build_kernels(k, *asan_flags)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = SCRIPT.format(root=root, zs=str(zs), k=str(k))
    # libzstd, as numcodecs calls it for the verdicts, allocates what a frame header claims (terabytes):
    # a MemoryError there, as without the sanitizer
    env = {**os.environ, "LD_PRELOAD": asan, "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    print(counts)
    assert counts["zstd accepted"] > 300 and counts["zstd refused"] > 2000
    assert counts["lz4 passed"] > 20 and counts["lz4 stopped"] > 200
    assert counts["blosc table sound"] > 500
