// Structure checks of compressed chunks before nvCOMP decodes them (gpu/decoders/validate.py): zstd frame and
// block headers (kind 1), and lz4 streams walked sequence by sequence, by one thread or a warp.

#include "common.cuh"

__device__ unsigned le32(const u8* p) {
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((unsigned)p[3] << 24);
}

// kind 1, for zstd-decoder "nvcomp" only (trusted data): frame and block headers, stated sizes
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

// An lz4 stream's bytes: d[q], read from the shared-memory window win[q - base] where base <= q < hi.
// Without a window (one thread walking alone) base = hi = 0. With one, the 32 lanes of a warp refill it
// together with coalesced 16-byte loads: one thread reading global memory a byte at a time made this
// walk the costliest step of reading blosc lz4 chunks (docs/performance.md).
// Lengths are 32-bit: lz4 blocks are under 2^31 bytes (LZ4_MAX_INPUT_SIZE), larger claims are corrupt.
#define LZ4_WINDOW 2048
#define LZ4_AHEAD 128  // bytes past a round's first sequence that its lanes mostly read
#define LZ4_MAX 0x7E000000
typedef struct { const u8* d; int n; int base, hi; u8* win; } lz4_src;
#ifdef __CUDA_ARCH__
#define LZ4_LANE (threadIdx.x & 31)
#define LZ4_STRIDE 512  // the 32 lanes' 16-byte loads
#define LZ4_SYNC() __syncwarp()
#else  // the host plays a warp with one thread (tests/codecs/test_kernels_c.py)
#define LZ4_LANE 0
#define LZ4_STRIDE 16
#define LZ4_SYNC()
#endif

__device__ unsigned lz4_at(const lz4_src* s, int q) {
    unsigned r = (unsigned)(q - s->base);
    return r < (unsigned)(s->hi - s->base) ? s->win[r] : s->d[q];
}

// a warp's window from byte p on, unless it already holds [p, p + LZ4_AHEAD) or the stream's end
__device__ void lz4_window(lz4_src* s, int p) {
    if (!s->win || p + LZ4_AHEAD <= s->hi || s->hi == s->n) return;
    const u8* a0 = (const u8*)((unsigned long long)(s->d + p) & ~15ull);
    LZ4_SYNC();  // every lane is done with the old window
    s->base = (int)(a0 - s->d);
    s->hi = s->base + LZ4_WINDOW < s->n ? s->base + LZ4_WINDOW : s->n;
    // 16-byte aligned loads while they end inside the stream, then its last bytes one by one; the
    // first may begin up to 15 bytes before byte p, inside the chunk (lz4's 4-byte size before its
    // block, 16 aligned) or the blosc frame (its header and table before every stream)
    const u8* end = s->d + s->n;
    for (int k = LZ4_LANE * 16; k < LZ4_WINDOW && a0 + k < end; k += LZ4_STRIDE) {
        if (a0 + k + 16 <= end) {
            *(uint4*)(s->win + k) = *(const uint4*)(a0 + k);
        } else {
            for (int b = 0; a0 + k + b < end; b++) s->win[k + b] = a0[k + b];
        }
    }
    LZ4_SYNC();
}

// adds the 255-continued length bytes from *p on to *len; false when the stream ends before the last
__device__ bool lz4_more(const lz4_src* s, int* p, i64* len) {
    unsigned b;
    do {
        if (*p >= s->n) return false;
        b = lz4_at(s, (*p)++);
        *len += b;
    } while (b == 255);
    return true;
}

// A sequence, as far as it can be read without the decoded bytes before it: flags, the offset less
// the literal length (a match reaches before the block when it exceeds the bytes decoded before the
// sequence), the bytes it decodes (capped past LZ4_MAX: the block is then too long either way), where
// the next one starts, and its literal length.
#define LZ4_SHORT 1     // the stream ends in its token, literal length or literals, or before its offset
#define LZ4_LAST 2      // its literals end the stream (adv: their length)
#define LZ4_NO_OFF 4    // its offset is 0
#define LZ4_SHORT_ML 8  // the stream ends in its match length
typedef struct { int flags, reach, adv, next, lit; } lz4_seq;

// the sequence that would start at byte q
__device__ lz4_seq lz4_parse(const lz4_src* s, int q) {
    lz4_seq c = {LZ4_SHORT, 0, 0, 0, 0};
    int n = s->n;
    if (q >= n) return c;
    unsigned tok = lz4_at(s, q);
    int p = q + 1;
    i64 lit = tok >> 4;
    if ((lit == 15 && !lz4_more(s, &p, &lit)) || lit > n - p) return c;
    p += (int)lit;
    if (p == n) {
        c.flags = LZ4_LAST;
        c.adv = (int)lit;
        return c;
    }
    if (n - p < 2) return c;
    int off = lz4_at(s, p) | (lz4_at(s, p + 1) << 8);
    p += 2;
    i64 ml = tok & 15;
    c.flags = (off ? 0 : LZ4_NO_OFF) | (ml == 15 && !lz4_more(s, &p, &ml) ? LZ4_SHORT_ML : 0);
    c.reach = off - (int)lit;
    c.lit = (int)lit;
    i64 adv = lit + ml + 4;
    c.adv = adv > LZ4_MAX ? LZ4_MAX + 1 : (int)adv;
    c.next = p;
    return c;
}

// A sequence applied to the count of bytes decoded before it: the stream's status, or -1 to go on. As
// liblz4's LZ4_decompress_safe has it, a match starts 12 bytes or more before the block's end (MFLIMIT)
// and ends 5 or more before it (LASTLITERALS): the block ends in literals that no match reaches into.
__device__ int lz4_apply(const lz4_seq* c, i64* out, i64 expected) {
    if (c->flags) {  // rare: the last sequence, or damage
        if (c->flags & LZ4_SHORT) return 1;
        if (c->flags & LZ4_LAST) return *out + c->adv == expected ? 0 : 1;
        if (c->flags & LZ4_NO_OFF) return 3;
        if (c->reach > *out) return 3;
        return 1;  // LZ4_SHORT_ML
    }
    if (c->reach > *out) return 3;
    if (*out + c->lit > expected - 12 || *out + c->adv > expected - 5) return 3;
    *out += c->adv;
    return -1;
}

// one thread's walk, sequence by sequence
__device__ int lz4_block(const lz4_src* s, i64 expected) {
    i64 out = 0;
    if (s->n < 1) return 1;
    for (int p = 0;;) {
        lz4_seq c = lz4_parse(s, p);
        int st = lz4_apply(&c, &out, expected);
        if (st >= 0) return st;
        p = c.next;  // at least 3 bytes on
    }
}

// A warp's walk: lane k parses the sequence that would start at byte p + k, then the warp follows the
// chain of those that do (five shuffles each, not a parse: in byte-shuffled data a sequence is a few bytes)
// and goes on from the first that starts past p + 31. The same statuses as lz4_block.
__device__ int lz4_block_warp(lz4_src* s, i64 expected) {
    i64 out = 0;
    if (s->n < 1) return 1;
    for (int p = 0;;) {
        lz4_window(s, p);
#ifdef __CUDA_ARCH__
        lz4_seq mine = lz4_parse(s, p + LZ4_LANE);
#else
        lz4_seq lanes[32];
        for (int k = 0; k < 32; k++) lanes[k] = lz4_parse(s, p + k);
#endif
        for (int k = 0;;) {
#ifdef __CUDA_ARCH__
            lz4_seq c = {__shfl_sync(~0u, mine.flags, k), __shfl_sync(~0u, mine.reach, k),
                         __shfl_sync(~0u, mine.adv, k), __shfl_sync(~0u, mine.next, k),
                         __shfl_sync(~0u, mine.lit, k)};
#else
            lz4_seq c = lanes[k];
#endif
            int st = lz4_apply(&c, &out, expected);
            if (st >= 0) return st;
            k = c.next - p;
            if (k >= 32) {
                p = c.next;
                break;
            }
        }
    }
}

// kind 4: numcodecs' lz4 (a 4-byte decoded size, then a block); kind 5: a bare block (blosc's).
// With a window (a warp's, in shared memory) the warp walks the block together, else one thread.
__device__ int lz4_item(const u8* d, i64 n, int kind, i64 expected, u8* win, i64* claimed) {
    *claimed = -1;
    int head = kind == 4 ? 4 : 0;
    if (n < head + 1) return 1;
    if (kind == 4) {
        *claimed = (int)le32(d);
        if (*claimed != expected) return 4;
    }
    if (n - head > LZ4_MAX || expected > LZ4_MAX) return 3;
    lz4_src s = {d + head, (int)(n - head), 0, 0, win};
    int st = win ? lz4_block_warp(&s, expected) : lz4_block(&s, expected);
    if (!st && kind == 5) *claimed = expected;
    return st;
}

__device__ void validate_item(i64 i, const u8* buf, const i64* offsets, const i64* sizes, int kind,
                              const i64* expected_sizes, int* status, i64* claimed) {
    const u8* d = buf + offsets[i];
    i64 m = sizes[i], expected = expected_sizes[i];
    claimed[i] = -1;  // the decoded size the header states, -1 if none
    int st;
    if (m == 0) st = 1;
    else if (kind == 1) st = zstd(d, m, expected, claimed + i);
    else st = lz4_item(d, m, kind, expected, 0, claimed + i);
    status[i] = st;
}

#ifdef __CUDACC__  // the kernels; the host tests call the device functions above
extern "C" __global__ void validate(const u8* buf, const i64* offsets, const i64* sizes, int kind,
                                    const i64* expected_sizes, int* status, i64* claimed, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) validate_item(i, buf, offsets, sizes, kind, expected_sizes, status, claimed);
}

#define LZ4_WARPS 4  // warps of a CUDA block in validate_lz4 (its blockDim.x is 32 * LZ4_WARPS)

// lz4 items (kinds 4 and 5), a warp each
extern "C" __global__ void validate_lz4(const u8* buf, const i64* offsets, const i64* sizes, int kind,
                                        const i64* expected_sizes, int* status, i64* claimed, int n) {
    __shared__ __align__(16) u8 win[LZ4_WARPS * LZ4_WINDOW];
    i64 i = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (i >= n) return;  // the same for the whole warp
    i64 c;
    int st = lz4_item(buf + offsets[i], sizes[i], kind, expected_sizes[i], win + (threadIdx.x >> 5) * LZ4_WINDOW, &c);
    if ((threadIdx.x & 31) == 0) {
        status[i] = st;
        claimed[i] = c;
    }
}
#endif
