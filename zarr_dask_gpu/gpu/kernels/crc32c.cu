// The crc32c check of chunks that end in their checksum (gpu/decoders/validate.py), a CUDA block a chunk.

#include "common.cuh"

#define CRC32C_POLY 0x82F63B78u

// the standard crc32c (initial and final inversion) of n bytes, a byte at a time
__device__ u32 crc_segment(const u8* d, i64 n, const u32* table) {
    u32 c = 0xFFFFFFFFu;
    for (i64 i = 0; i < n; i++) c = table[(c ^ d[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// a * b modulo the polynomial, reflected (zlib's multmodp)
__device__ u32 multmodp(u32 a, u32 b) {
    u32 m = 1u << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ CRC32C_POLY : b >> 1;
    }
    return p;
}

// crc32c(A || B) from crc32c(A), crc32c(B) and len(B)  (zlib's crc32_combine)
__device__ u32 crc_combine(u32 crc1, u32 crc2, i64 len2) {
    u32 x2n = 1u << 30, p = 1u << 31;  // x^1, and x^0
    for (int i = 0; i < 3; i++) x2n = multmodp(x2n, x2n);  // x^8: one byte
    for (; len2; len2 >>= 1) {
        if (len2 & 1) p = multmodp(x2n, p);
        x2n = multmodp(x2n, x2n);
    }
    return multmodp(p, crc1) ^ crc2;
}

__device__ void crc_table(u32* table, i64 t, i64 nt) {
    for (i64 i = t; i < 256; i += nt) {
        u32 c = (u32)i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
        table[i] = c;
    }
}

#ifdef __CUDACC__  // the kernels; the host tests call the device functions above
// one chunk per CUDA block: each thread takes a segment, thread 0 combines; 1 where the crc32c of
// the chunk's first n - 4 bytes differs from its last 4 (little-endian)
extern "C" __global__ void crc32c_check(const u8* buf, const i64* offsets, const i64* sizes, int* mismatch) {
    __shared__ u32 table[256];
    __shared__ u32 crcs[256];
    __shared__ i64 lens[256];
    i64 c = blockIdx.x, t = threadIdx.x, nt = blockDim.x;
    crc_table(table, t, nt);
    __syncthreads();
    const u8* d = buf + offsets[c];
    i64 n = sizes[c] - 4, per = (n + nt - 1) / nt, lo = t * per < n ? t * per : n, hi = lo + per < n ? lo + per : n;
    crcs[t] = crc_segment(d + lo, hi - lo, table);
    lens[t] = hi - lo;
    __syncthreads();
    if (t == 0) {
        u32 crc = crcs[0];
        for (i64 k = 1; k < nt; k++) crc = crc_combine(crc, crcs[k], lens[k]);
        u32 stored = d[n] | (d[n + 1] << 8) | (d[n + 2] << 16) | ((u32)d[n + 3] << 24);
        mismatch[c] = crc != stored;
    }
}
#endif
