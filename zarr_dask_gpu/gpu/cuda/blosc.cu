// blosc1 frames (gpu/blosc.py): each frame's table of inner streams, and the byte or bit unshuffle of
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

// block b of the decoded (shuffled) bytes into out; mode 1 byte shuffle, 2 bit shuffle, 0 none
__device__ void unshuffle_item(i64 b, i64 t, i64 nt, const u8* in, u8* out, const i64* start, const i64* bsize,
                               const int* tsz, const int* mode) {
    i64 s = start[b], m = bsize[b];
    int ts = tsz[b], md = mode[b];
    i64 n = m / ts;
    for (i64 k = t; k < m; k += nt) {
        u8 v;
        if (md == 1 && k < n * ts) {
            v = in[s + (k % ts) * n + k / ts];
        } else if (md == 2 && n % 8 == 0) {
            i64 i = k / ts, jb = k % ts;
            v = 0;
            for (int q = 0; q < 8; q++) {
                i64 idx = (jb * 8 + q) * n + i;
                v |= (u8)(((in[s + idx / 8] >> (idx % 8)) & 1) << q);
            }
        } else {
            v = in[s + k];
        }
        out[s + k] = v;
    }
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

extern "C" __global__ void unshuffle(const u8* in, u8* out, const i64* start, const i64* bsize, const int* tsz,
                                     const int* mode) {
    unshuffle_item(blockIdx.x, threadIdx.x, blockDim.x, in, out, start, bsize, tsz, mode);
}
#endif
