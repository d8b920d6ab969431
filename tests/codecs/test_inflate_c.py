"""This package's inflate kernel (``gpu/kernels/inflate.cu``), compiled as C, against the reference: one
lane under AddressSanitizer, and a warp's lanes as threads under ThreadSanitizer, over every zlib and
gzip chunk of the damage corpus (tests/damage.py, its Deflate streams built bit by bit among them)
and thousands of streams of every block kind with bits flipped, cut short or given the wrong size. A
stream the kernel accepts decodes to exactly the reference's bytes (zlib; Python's gzip reader);
every sound stream zlib writes is accepted; no read or write leaves its buffer whatever the bytes,
and no two lanes touch the same bytes unordered. What it refuses the GPU pipeline hands to the
reference on the host."""

import json
import os
import subprocess
import sys

import pytest

from zarr_dask_gpu.gpu import kernels
from zarr_dask_gpu.gpu.kernels import shared

from .test_kernels_c import _asan

pytestmark = pytest.mark.skipif(_asan() is None, reason="needs a C compiler with AddressSanitizer")

SOURCE = kernels.CUDA / "inflate.cu"
HUFF = 2 * (16 + 288 + 1024) + 4  # sizeof(ihuff)

SCRIPT = r"""
import collections, ctypes, json, sys, zlib
import numpy as np
sys.path.insert(0, {root!r})
from tests import damage
from zarr_dask_gpu.codecs import reference as host

lib = ctypes.CDLL({so!r})
p = lambda a: a.ctypes.data_as(ctypes.c_void_p)
table = np.zeros(256, np.uint32)
lib.if_crc_table(p(table), ctypes.c_longlong(0), ctypes.c_longlong(1))
WRAPPERS = {{"zlib": 1, "gzip": 2}}

def kernel(data, cap, codec):
    src = np.frombuffer(data, np.uint8).copy()  # exactly the stream: any read past it is seen
    out = np.zeros(cap, np.uint8)
    n, cap_, wrapper = ctypes.c_longlong(len(data)), ctypes.c_longlong(cap), ctypes.c_int(WRAPPERS[codec])
    args = (p(src), n, p(out), cap_, wrapper)
    if {lanes} > 1:
        st = lib.inflate_lanes(*args, p(table))
        assert st >= 0, "the lanes disagree on the verdict"
    else:
        lit, dist = np.zeros({huff}, np.uint8), np.zeros({huff}, np.uint8)
        st = lib.inflate_item(*args, p(table), p(lit), p(dist))
    return st, out.tobytes()

def reference(data, cap, codec):
    try:
        raw = bytes((host.zlib_at_most if codec == "zlib" else host.gzip_at_most)(data, cap, None))
    except host.ERRORS:
        return None
    return raw if len(raw) == cap else None

counts = collections.Counter()
def judge(data, cap, codec, sound=False):
    st, got = kernel(data, cap, codec)
    want = reference(data, cap, codec)
    verdict = "decodes" if want is not None else "refuses"
    counts[f"{{codec}} {{'accepted' if st == 0 else 'refused'}}, reference {{verdict}}"] += 1
    where = (codec, data[:16].hex(), cap)
    assert st != 0 or got == want, ("accepted what the reference does not decode alike", where)
    assert not sound or st == 0, ("refused a sound stream", where)

for case in damage.corpus(0, "ci"):
    if case.codec in WRAPPERS:
        judge(case.data, case.size, case.codec)

rng = np.random.default_rng(3)
smooth = np.cumsum(rng.standard_normal(30000)).astype(np.float32).round(1).tobytes()
texts = [b"a", b"abc" * 130, rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(), smooth, bytes(70000)]
for codec, wbits in (("zlib", 15), ("zlib", 9), ("gzip", 31)):
    for raw in texts:
        for level, strategy in ((0, 0), (1, zlib.Z_FIXED), (6, 0), (9, zlib.Z_HUFFMAN_ONLY), (4, zlib.Z_RLE)):
            c = zlib.compressobj(level, zlib.DEFLATED, wbits, 9, strategy)
            data = c.compress(raw) + c.flush()
            judge(data, len(raw), codec, sound=True)
            judge(data + b"xy" if codec == "zlib" else data + bytes(3), len(raw), codec, sound=True)
            judge(data, len(raw) + 1, codec)
            if len(raw) > 1:
                judge(data, len(raw) - 1, codec)
            for _ in range({mutations}):
                d = bytearray(data)
                for _ in range(int(rng.integers(1, 3))):
                    at = int(rng.integers(0, len(d)))
                    d[at] ^= 1 << int(rng.integers(0, 8))
                judge(bytes(d), len(raw), codec)
            for k in rng.integers(0, len(data), 10):
                judge(data[:k], len(raw), codec)
print(json.dumps(counts))
"""


# the kernel's warp on the host, IF_LANES lanes (given on the command line): each lane a thread,
# __syncwarp a barrier, __shfl_sync through slots
LANES = r"""
#include <pthread.h>
static __thread int if_lane_id;
#define IF_LANE if_lane_id
static pthread_barrier_t if_barrier;
#define IF_SYNC() pthread_barrier_wait(&if_barrier)
static unsigned if_slots[IF_LANES];
static unsigned if_shfl(unsigned v, int k) {
    if_slots[if_lane_id] = v;
    pthread_barrier_wait(&if_barrier);
    unsigned got = if_slots[k];
    pthread_barrier_wait(&if_barrier);
    return got;
}
#define IF_SHFL(v, k) if_shfl((v), (k))
#include "inflate.cu"

// the stream the lanes decode next, and each lane's status
static struct {
    const u8* src;
    i64 n;
    u8* dst;
    i64 cap;
    int wrapper;
    const u32* table;
    ihuff lit, dist;
    int status[IF_LANES];
} job;
static pthread_barrier_t if_start, if_done;  // the lanes and the caller

static void* lane_main(void* arg) {
    if_lane_id = (int)(long)arg;
    for (;;) {
        pthread_barrier_wait(&if_start);
        int st = inflate_item(job.src, job.n, job.dst, job.cap, job.wrapper, job.table, &job.lit, &job.dist);
        job.status[if_lane_id] = st;
        pthread_barrier_wait(&if_done);
    }
    return 0;
}

// inflate_item run by IF_LANES threads as a warp's lanes: the status they all return, or -1
int inflate_lanes(const u8* src, i64 n, u8* dst, i64 cap, int wrapper, const u32* table) {
    static int started = 0;
    if (!started) {
        started = 1;
        pthread_barrier_init(&if_barrier, 0, IF_LANES);
        pthread_barrier_init(&if_start, 0, IF_LANES + 1);
        pthread_barrier_init(&if_done, 0, IF_LANES + 1);
        for (long l = 0; l < IF_LANES; l++) {
            pthread_t t;
            pthread_create(&t, 0, lane_main, (void*)l);
        }
    }
    job.src = src, job.n = n, job.dst = dst, job.cap = cap, job.wrapper = wrapper, job.table = table;
    pthread_barrier_wait(&if_start);
    pthread_barrier_wait(&if_done);
    for (int l = 1; l < IF_LANES; l++)
        if (job.status[l] != job.status[0]) return -1;
    return job.status[0];
}
"""


def _judge_all(tmp_path, sanitizer: str, lanes: int, mutations: int) -> dict[str, int]:
    runtime = subprocess.run(
        ["cc", f"-print-file-name=lib{sanitizer[0]}san.so"], capture_output=True, text=True
    ).stdout.strip()
    if not os.path.isabs(runtime):
        pytest.skip(f"needs a C compiler with lib{sanitizer[0]}san")
    so, source = tmp_path / "inflate.so", tmp_path / "lanes.c"
    source.write_text(LANES if lanes > 1 else f'#include "{SOURCE.name}"\n')
    flags = ["-O1", "-g", f"-fsanitize={sanitizer}", "-fno-omit-frame-pointer", "-shared", "-fPIC"]
    flags += [f"-DIF_LANES={lanes}"] if lanes > 1 else []
    flags += shared.flags("inflate.cu")
    subprocess.run(["cc", *flags, "-I", str(kernels.CUDA), "-o", str(so), str(source)], check=True)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = SCRIPT.format(root=root, so=str(so), huff=HUFF, mutations=mutations, lanes=lanes)
    env = {
        **os.environ,
        "LD_PRELOAD": runtime,
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
        "TSAN_OPTIONS": "halt_on_error=1:exitcode=66",
    }
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1200)
    assert run.returncode == 0, run.stderr[-4000:]
    counts = json.loads(run.stdout.strip().splitlines()[-1])
    print(counts)
    return counts


def test_the_kernel_accepts_only_what_the_reference_decodes_alike_and_stays_in_bounds(tmp_path):
    counts = _judge_all(tmp_path, "address", 1, 150)
    for codec in ("zlib", "gzip"):
        assert counts[f"{codec} accepted, reference decodes"] > 100
        assert counts[f"{codec} refused, reference refuses"] > 1000


def test_a_warps_lanes_decode_as_one_lane_does_without_a_race(tmp_path):
    """Four lanes run as threads under ThreadSanitizer (the kernel's lane loops and checksum slices do
    not depend on their number): any two that touch the same bytes without a __syncwarp between them
    are a race, and every lane must reach the same verdict and the reference's bytes."""
    counts = _judge_all(tmp_path, "thread", 4, 10)
    for codec in ("zlib", "gzip"):
        assert counts[f"{codec} accepted, reference decodes"] > 100
        assert counts[f"{codec} refused, reference refuses"] > 300


def test_checksums_joined_from_slices_are_zlibs(tmp_path):
    """The kernel's lanes each sum a slice of a chunk and join the sums (zlib's adler32_combine and
    crc32_combine); joined over slices of every length, empty ones among them, they are zlib's."""
    import ctypes
    import zlib

    import numpy as np

    so = tmp_path / "inflate.so"
    flags = ["-O1", "-shared", "-fPIC", *shared.flags("inflate.cu")]
    subprocess.run(["cc", *flags, "-x", "c", "-o", str(so), str(SOURCE)], check=True)
    lib = ctypes.CDLL(str(so))
    for name in ("if_adler32", "if_adler32_join", "if_crc32", "if_crc32_join"):
        getattr(lib, name).restype = ctypes.c_uint32
    table = np.zeros(256, np.uint32)
    lib.if_crc_table(table.ctypes.data_as(ctypes.c_void_p), ctypes.c_longlong(0), ctypes.c_longlong(1))
    rng = np.random.default_rng(0)
    for n in (0, 1, 31, 32, 33, 5552, 5553, 100_000, 1_048_577):
        data = rng.integers(0, 256, n, dtype=np.uint8)
        for lanes in (1, 2, 32):
            slice_ = (n + lanes - 1) // lanes
            adler = crc = None
            for j in range(lanes):
                part = data[j * slice_ : (j + 1) * slice_]
                at, k = ctypes.c_void_p(part.ctypes.data), ctypes.c_longlong(len(part))
                a, c = lib.if_adler32(at, k), lib.if_crc32(at, k, table.ctypes.data_as(ctypes.c_void_p))
                adler = a if adler is None else lib.if_adler32_join(adler, a, k)
                crc = c if crc is None else lib.if_crc32_join(crc, c, k)
            assert (adler, crc) == (zlib.adler32(data.tobytes()), zlib.crc32(data.tobytes())), (n, lanes)
