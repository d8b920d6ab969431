// blosc1 frames (gpu/decoders/blosc.py): each frame's table of inner streams, and the byte or bit unshuffle of
// every decoded block.

#include "common.cuh"

__device__ i64 rd32(const u8* p) { return (int)(p[0] | (p[1] << 8) | (p[2] << 16) | ((unsigned)p[3] << 24)); }

// Block j of frame c: its streams into the table's rows from row0[c] + j * (streams of a full block), so
// that every block is walked by a thread of its own; 0 when sound. A frame stored as is (flags & 2)
// has one row, its block 0's.
__device__ int streams_item(i64 c, i64 j, const u8* buf, const i64* offsets, const i64* sizes, const i64* row0,
                            const i64* out0, i64* src, i64* csize, i64* dst, i64* dsize) {
    const u8* d = buf + offsets[c];
    i64 m = sizes[c];
    int flags = d[2], ts = d[3];
    i64 nbytes = rd32(d + 4), bs = rd32(d + 8);
    if (flags & 2) {
        if (j == 0) {
            i64 r = row0[c];
            src[r] = offsets[c] + 16; csize[r] = nbytes; dst[r] = out0[c]; dsize[r] = nbytes;
        }
        return 0;
    }
    i64 nblocks = (nbytes + bs - 1) / bs, left = nbytes % bs;
    int split = !((flags >> 4) & 1) && ts <= 16 && bs / ts >= 128;
    int last = (j == nblocks - 1) && left > 0;
    i64 bsize = last ? left : bs;
    i64 ns = (split && !last) ? ts : 1, neblock = bsize / ns, r = row0[c] + j * (split ? ts : 1);
    i64 pos = rd32(d + 16 + 4 * j);
    if (pos < 16 + 4 * nblocks || pos > m) return 3;
    for (i64 s = 0; s < ns; s++) {
        if (pos + 4 > m) return 1;
        i64 cb = rd32(d + pos);
        pos += 4;
        if (cb <= 0 || cb > neblock || pos + cb > m) return 3;
        src[r] = offsets[c] + pos; csize[r] = cb; dst[r] = out0[c] + j * bs + s * neblock; dsize[r] = neblock;
        r++;
        pos += cb;
    }
    return 0;
}

// An 8x8 bit matrix, a byte a row, transposed: bits 8r + c and 8c + r swapped (Hacker's Delight, 7-3).
__device__ u64 transpose8(u64 x) {
    u64 t = (x ^ (x >> 7)) & 0x00AA00AA00AA00AAull;
    x ^= t ^ (t << 7);
    t = (x ^ (x >> 14)) & 0x0000CCCC0000CCCCull;
    x ^= t ^ (t << 14);
    t = (x ^ (x >> 28)) & 0x00000000F0F0F0F0ull;
    return x ^ t ^ (t << 28);
}

// The bit unshuffle of a block's 8 * g elements of ts bytes (1, 2, 4 or 8: inlined with ts a constant, so
// that the loops unroll into registers), a thread 8 elements a step: byte e of byte j's 8 bit planes,
// transposed, is byte j of elements 8e..8e+7. A thread's 8 * ts output bytes are stored as words of 8 (ts
// 1) or 16 bytes, to which dst is aligned; a warp's byte loads span consecutive bytes of a plane.
__device__ __forceinline__ void bit_unshuffle_groups(int th, int nth, int g, int ts, const u8* src, u8* dst) {
    for (int e = th; e < g; e += nth) {
        u64 y[8];
        for (int j = 0; j < ts; j++) {
            const u8* p = src + 8 * j * g + e;
            u64 x = 0;
            for (int q = 0; q < 8; q++) x |= (u64)p[q * g] << (8 * q);
            y[j] = transpose8(x);
        }
        u8* o = dst + 8 * ts * e;
        if (ts == 1) {
            *(u64*)o = y[0];
            continue;
        }
        for (int k = 0; k < 2 * ts; k += 4) {  // output bytes 4k..4k+15; byte c * ts + j is y[j]'s byte c
            u32 w[4];
            for (int h = 0; h < 4; h++) {
                u32 v = 0;
                for (int b = 0; b < 4; b++) {
                    int at = 4 * (k + h) + b;
                    v |= (u32)((y[at % ts] >> (8 * (at / ts))) & 0xff) << (8 * b);
                }
                w[h] = v;
            }
            uint4 v4;
            v4.x = w[0];
            v4.y = w[1];
            v4.z = w[2];
            v4.w = w[3];
            *(uint4*)(o + 4 * k) = v4;
        }
    }
}

// A decoded (shuffled) block of m bytes from src into dst, thread th of nth; mode 1 byte shuffle, 2 bit
// shuffle, 0 none. Of the block, the n = m / ts whole elements are unshuffled (bit shuffle only where n is a
// multiple of 8, as c-blosc 1.x's format version 2: else the block is copied as is) and the bytes after
// them copied as they are. Bit shuffles of 1, 2, 4 or 8-byte elements into an aligned block go 8 elements
// a thread (bit_unshuffle_groups); the rest, threads on consecutive elements of one byte plane after
// another, so that a warp's loads and stores each span consecutive bytes. The indices are 32-bit (a blosc
// block is under 2 GiB) and no byte needs a division.
__device__ void unshuffle_block(int th, int nth, int m, int ts, int md, const u8* src, u8* dst) {
    int n = m / ts, done = 0;
    if (md == 1) {  // byte j of element i is byte i of plane j
        for (int j = 0; j < ts; j++)
            for (int i = th; i < n; i += nth) dst[i * ts + j] = src[j * n + i];
        done = n * ts;
    } else if (md == 2 && n % 8 == 0) {  // bit q of byte j of element i is bit i of plane 8j + q
        int g = n / 8;  // bytes a bit plane
        int words = ((u64)dst & (ts == 1 ? 7 : 15)) == 0;
        if (words && ts == 1) bit_unshuffle_groups(th, nth, g, 1, src, dst);
        else if (words && ts == 2) bit_unshuffle_groups(th, nth, g, 2, src, dst);
        else if (words && ts == 4) bit_unshuffle_groups(th, nth, g, 4, src, dst);
        else if (words && ts == 8) bit_unshuffle_groups(th, nth, g, 8, src, dst);
        else for (int j = 0; j < ts; j++) {
            const u8* planes = src + 8 * j * g;
            for (int i = th; i < n; i += nth) {
                int at = i >> 3, bit = i & 7;
                u8 v = 0;
                for (int q = 0; q < 8; q++) v |= (u8)(((planes[q * g + at] >> bit) & 1) << q);
                dst[i * ts + j] = v;
            }
        }
        done = n * ts;
    }
    for (int k = done + th; k < m; k += nth) dst[k] = src[k];
}

__device__ void unshuffle_item(i64 b, i64 t, i64 nt, const u8* in, u8* out, const i64* start, const i64* bsize,
                               const i64* tsz, const i64* mode) {
    unshuffle_block((int)t, (int)nt, (int)bsize[b], (int)tsz[b], (int)mode[b], in + start[b], out + start[b]);
}

#ifdef __CUDACC__  // the kernels; the host tests call the device functions above
// a thread a block: item i is block j[i] of frame c[i]; status[c] (zeroed) gets a failing block's code
extern "C" __global__ void streams(const u8* buf, const i64* offsets, const i64* sizes, const i64* row0,
                                   const i64* out0, i64* src, i64* csize, i64* dst, i64* dsize, const i64* c,
                                   const i64* j, int* status, i64 n) {
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int st = streams_item(c[i], j[i], buf, offsets, sizes, row0, out0, src, csize, dst, dsize);
    if (st) atomicCAS(status + c[i], 0, st);
}

// 64 registers, four thread blocks an SM: uncapped, the 8-byte elements' bit unshuffle takes 168 registers
// and leaves one thread block an SM, several times slower over bitshuffled blocks (docs/performance.md)
extern "C" __global__ void __launch_bounds__(256, 4)
    unshuffle(const u8* in, u8* out, const i64* start, const i64* bsize, const i64* tsz, const i64* mode) {
    unshuffle_item(blockIdx.x, threadIdx.x, blockDim.x, in, out, start, bsize, tsz, mode);
}

// The same in place, a block no larger than the dynamic shared memory: read into it, then unshuffled back
// where it lay, so that the inner streams decode straight into the output (gpu/decoders/blosc.py, _IN_PLACE_MAX).
extern "C" __global__ void __launch_bounds__(256, 4)
    unshuffle_in_place(u8* out, const i64* start, const i64* bsize, const i64* tsz, const i64* mode) {
    extern __shared__ uint4 room[];
    i64 b = blockIdx.x;
    int md = (int)mode[b], m = (int)bsize[b];
    if (md == 0) return;  // a block of a frame not shuffled: it is in place already
    u8* at = out + start[b];
    u8* s = (u8*)room;
    int words = ((size_t)at & 15) ? 0 : m / 16;  // 16 bytes a load where aligned, the rest bytewise
    for (int k = threadIdx.x; k < words; k += blockDim.x) room[k] = ((const uint4*)at)[k];
    for (int k = 16 * words + threadIdx.x; k < m; k += blockDim.x) s[k] = at[k];
    __syncthreads();
    unshuffle_block(threadIdx.x, blockDim.x, m, (int)tsz[b], md, s, at);
}
#endif
