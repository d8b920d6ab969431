"""A structure check of every compressed chunk in a batch, on the device, before nvCOMP sees it.

nvCOMP 6.0 hangs on truncated zstd frames and faults (poisoning the CUDA context) on garbage
(docs/design.md). One thread per chunk walks the frame's headers: zstd block headers, the gzip
header and size trailer, the zlib header, lz4 sequences. It reads a few bytes per block, so it
costs little next to decoding, and it checks every stated size against the metadata.
"""

import functools

import cupy as cp
import numpy as np

from ..codecs.chain import Compression

_KINDS = {"zstd": 1, "gzip": 2, "zlib": 3, "lz4": 4}
REASONS = {
    1: "truncated or empty",
    2: "bad header (not a {compression} stream)",
    3: "corrupt {compression} structure",
    4: "header says {claimed} bytes, metadata says {expected}",
}

_SOURCE = r"""
typedef unsigned char u8;
typedef long long i64;
typedef unsigned long long u64;

__device__ unsigned le32(const u8* p) {
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((unsigned)p[3] << 24);
}

__device__ int zstd(const u8* d, i64 n, i64 expected, i64* claimed) {
    i64 p = 0, total = 0;
    bool known = true;
    while (p < n) {
        if (p + 4 > n) return 1;
        unsigned magic = le32(d + p);
        if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) {  // skippable frame
            if (p + 8 > n) return 1;
            p += 8 + (i64)le32(d + p + 4);
            continue;
        }
        if (magic != 0xFD2FB528u) return 2;
        p += 4;
        if (p >= n) return 1;
        u8 fhd = d[p++];
        if (fhd & 0x08) return 2;
        int single = (fhd >> 5) & 1, flag = fhd >> 6, dict = fhd & 3;
        int fcs = flag == 0 ? single : (flag == 1 ? 2 : (flag == 2 ? 4 : 8));
        p += (single ? 0 : 1) + (dict == 0 ? 0 : (dict == 1 ? 1 : (dict == 2 ? 2 : 4)));
        if (p + fcs > n) return 1;
        if (fcs) {
            u64 v = 0;
            for (int k = 0; k < fcs; k++) v |= (u64)d[p + k] << (8 * k);
            total += (i64)v + (fcs == 2 ? 256 : 0);
        } else {
            known = false;
        }
        p += fcs;
        for (;;) {
            if (p + 3 > n) return 1;
            unsigned bh = d[p] | (d[p + 1] << 8) | (d[p + 2] << 16);
            p += 3;
            int type = (bh >> 1) & 3;
            i64 size = bh >> 3;
            if (type == 3 || size > 131072) return 3;
            p += type == 1 ? 1 : size;
            if (p > n) return 1;
            if (bh & 1) break;
        }
        if (fhd & 0x04) p += 4;
        if (p > n) return 1;
    }
    *claimed = known ? total : -1;
    return known && total != expected ? 4 : 0;
}

__device__ int gzip(const u8* d, i64 n, i64 expected, i64* claimed) {
    if (n < 18) return 1;
    if (d[0] != 0x1f || d[1] != 0x8b || d[2] != 8 || (d[3] & 0xe0)) return 2;
    *claimed = le32(d + n - 4);
    return *claimed != (expected & 0xffffffffLL) ? 4 : 0;
}

__device__ int zlib(const u8* d, i64 n) {
    if (n < 6) return 1;
    if ((d[0] & 0x0f) != 8 || (d[0] * 256 + d[1]) % 31 || (d[1] & 0x20)) return 2;
    return 0;
}

__device__ int lz4(const u8* d, i64 n, i64 expected, i64* claimed) {
    if (n < 5) return 1;
    *claimed = (int)le32(d);
    if (*claimed != expected) return 4;
    i64 p = 4, out = 0;
    for (;;) {
        if (p >= n) return 1;
        unsigned tok = d[p++], s;
        i64 lit = tok >> 4;
        if (lit == 15) do { if (p >= n) return 1; s = d[p++]; lit += s; } while (s == 255);
        p += lit;
        out += lit;
        if (p > n) return 1;
        if (p == n) break;
        if (p + 2 > n) return 1;
        unsigned off = d[p] | (d[p + 1] << 8);
        p += 2;
        if (off == 0 || off > out) return 3;
        i64 ml = tok & 15;
        if (ml == 15) do { if (p >= n) return 1; s = d[p++]; ml += s; } while (s == 255);
        out += ml + 4;
        if (out > expected) return 3;
    }
    return out == expected ? 0 : 1;
}

extern "C" __global__ void validate(const u8* buf, const i64* offsets, const i64* sizes, int kind,
                                    i64 expected, int* status, i64* claimed, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u8* d = buf + offsets[i];
    i64 m = sizes[i];
    claimed[i] = -1;  // the decoded size the header states, -1 if none
    int st;
    if (m == 0) st = 1;
    else if (kind == 1) st = zstd(d, m, expected, claimed + i);
    else if (kind == 2) st = gzip(d, m, expected, claimed + i);
    else if (kind == 3) st = zlib(d, m);
    else st = lz4(d, m, expected, claimed + i);
    status[i] = st;
}
"""


@functools.cache
def _kernel() -> cp.RawKernel:
    return cp.RawKernel(_SOURCE, "validate")


def check_batch(
    buffer: cp.ndarray, offsets: np.ndarray, sizes: np.ndarray, compression: Compression, expected: int
) -> tuple[list[tuple[int, str]], bool]:
    """Check a batch of compressed chunks.

    Returns
    -------
    bad
        The chunks that must not be decoded, as (index, reason); empty when all are sound.
    sized
        Every chunk's header proved its decoded size (zstd with a content size, gzip, lz4), so
        nvCOMP can decode with sizes from the metadata, without reading headers back to the host.
    """
    n = len(offsets)
    status = cp.empty(n, dtype=np.int32)
    claimed = cp.empty(n, dtype=np.int64)
    threads = 128
    _kernel()(
        ((n + threads - 1) // threads,),
        (threads,),
        (
            buffer,
            cp.asarray(offsets, dtype=np.int64),
            cp.asarray(sizes, dtype=np.int64),
            np.int32(_KINDS[compression]),
            np.int64(expected),
            status,
            claimed,
            np.int32(n),
        ),
    )
    status_h, claimed_h = status.get(), claimed.get()
    bad = np.flatnonzero(status_h)
    # gzip states the size modulo 2**32 only
    sized = bool((claimed_h >= 0).all()) and not (compression == "gzip" and expected >= 2**32)
    return [
        (
            int(i),
            REASONS[int(status_h[i])].format(
                compression=compression, claimed=int(claimed_h[i]), expected=expected
            ),
        )
        for i in bad
    ], sized
