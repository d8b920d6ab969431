// Deflate (RFC 1951) in its zlib (RFC 1950) and gzip (RFC 1952) wrappers, a warp a stream.
//
// The warp's lanes read the stream's symbols together, each the same bits and the same table entries
// (the same instructions a single thread would issue), and split the work that can be split: a match's
// bytes, a stored block's bytes, a Huffman table's entries and the checksum. A match's byte i is the
// output's byte pos - back + i % back, written before the match began, so the lanes copy it in
// any order; a __syncwarp before each match orders it after the writes it reads. Compiled as C (the
// host tests) the warp is one lane and the same code runs serially.
//
// A stream is accepted only where zlib, and Python's gzip reader for gzip, decode it to exactly the
// chunk's bytes. Where this decoder cannot vouch for that it refuses the stream (a nonzero status),
// and the reference library on the host gives the verdict. It is stricter than zlib in three
// places: a zlib distance past the window its header declares, an empty code-length code, and gzip
// header flags outside RFC 1952's. Every read is checked against the stream's length and every write
// against the output's; every loop consumes input bits or output bytes, so it is bounded on any bytes.

#include "common.cuh"

// The statuses (IF_OK ... IF_CHECK), the wrappers (IF_RAW, IF_ZLIB, IF_GZIP) and IF_WARPS are defined by
// the compiler's caller, from gpu/kernels/shared.py: the launcher's own.
#if !defined(IF_CHECK) || !defined(IF_GZIP) || !defined(IF_WARPS)
#error "inflate.cu is compiled with the defines of gpu/kernels/shared.py (kernels.module, shared.flags)"
#endif


#define IF_FAST 10  // bits of a Huffman table's direct lookup

#ifdef __CUDACC__
#define IF_LANES 32
#define IF_LANE ((int)(threadIdx.x & 31))
#define IF_SYNC() __syncwarp()
#define IF_SHFL(v, k) __shfl_sync(0xFFFFFFFFu, (v), (k))
#elif !defined(IF_LANES)  // C: one lane (the host tests may define lanes run as threads)
#define IF_LANES 1
#define IF_LANE 0
#define IF_SYNC()
#define IF_SHFL(v, k) (v)
#endif

__constant__ u16 if_lbase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
__constant__ u8 if_lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
__constant__ u16 if_dbase[30] = {1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
                                 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
__constant__ u8 if_dext[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
__constant__ u8 if_order[19] = {16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15};

// the stream's bits, least significant first: s[0..n), bytes loaded up to `at`, the `cnt` bits of
// `buf` not yet consumed. Bytes past the end load as zeros; ib_drop refuses to consume them.
typedef struct {
    const u8* s;
    i64 n;
    i64 at;
    u64 buf;
    int cnt;
} ibits;

__device__ __forceinline__ void ib_start(ibits* b, const u8* s, i64 n, i64 at) {
    b->s = s;
    b->n = n;
    b->at = at;
    b->buf = 0;
    b->cnt = 0;
}

// the bits consumed
__device__ __forceinline__ i64 ib_pos(const ibits* b) { return 8 * b->at - b->cnt; }

// the next k (<= 25) bits: at least 57 are loaded, a byte at a time (at most 8 past the consumed)
__device__ __forceinline__ u32 ib_peek(ibits* b, int k) {
    while (b->cnt <= 56) {
        u64 v = b->at < b->n ? b->s[b->at] : 0;
        b->buf |= v << b->cnt;
        b->at++;
        b->cnt += 8;
    }
    return (u32)b->buf & ((1u << k) - 1u);
}

// consumes k bits that ib_peek loaded; false where they pass the stream's end
__device__ __forceinline__ bool ib_drop(ibits* b, int k) {
    b->buf >>= k;
    b->cnt -= k;
    return ib_pos(b) <= 8 * b->n;
}

__device__ __forceinline__ bool ib_get(ibits* b, int k, u32* v) {
    *v = ib_peek(b, k);
    return ib_drop(b, k);
}

// a canonical Huffman code: codes of each length, symbols in code order, and a direct table of the
// codes of up to IF_FAST bits (bit-reversed index; (symbol << 4) | length, 0 where none). One per
// warp, in shared memory: lane 0 writes the symbols, the lanes split the direct table.
typedef struct {
    u16 count[16];
    u16 symbol[288];
    u16 fast[1 << IF_FAST];
    int max;
} ihuff;

// the symbol of the code read from the low bits of v (first bit lowest) in at most `most` bits, as
// (symbol << 4) | length, or 0 where no code of at most `most` bits matches (puff's decode)
__device__ __forceinline__ u32 ih_walk(const u16* count, const u16* symbol, u32 v, int most) {
    int code = 0, first = 0, index = 0;
    for (int l = 1; l <= most; l++) {
        code |= (int)((v >> (l - 1)) & 1u);
        int c = count[l];
        if (code - c < first) return ((u32)symbol[index + (code - first)] << 4) | (u32)l;
        index += c;
        first = (first + c) << 1;
        code <<= 1;
    }
    return 0;
}

// 0: complete; 1: incomplete; -1: over-subscribed. lens[0..n) <= 15, n <= 288; every lane the same
__device__ int ih_build(ihuff* h, const u8* lens, int n) {
    u16 count[16];
    for (int l = 0; l < 16; l++) count[l] = 0;
    for (int s = 0; s < n; s++) count[lens[s]]++;
    int left = 1;
    for (int l = 1; l < 16; l++) {
        left = 2 * left - count[l];
        if (left < 0) return -1;
    }
    IF_SYNC();  // the lanes are done reading the code this one replaces
    if (IF_LANE == 0) {
        u16 offs[16];
        offs[1] = 0;
        for (int l = 1; l < 15; l++) offs[l + 1] = offs[l] + count[l];
        for (int s = 0; s < n; s++)
            if (lens[s]) h->symbol[offs[lens[s]]++] = (u16)s;
        h->max = 0;
        for (int l = 15; l > 0 && !h->max; l--)
            if (count[l]) h->max = l;
        for (int l = 0; l < 16; l++) h->count[l] = count[l];
    }
    IF_SYNC();
    for (int f = IF_LANE; f < (1 << IF_FAST); f += IF_LANES) h->fast[f] = (u16)ih_walk(count, h->symbol, (u32)f, IF_FAST);
    IF_SYNC();
    return left > 0;
}

// the next symbol of code h, or -1 (no code of these bits, or the stream ends)
__device__ __forceinline__ int ih_decode(ibits* b, const ihuff* h) {
    u32 e = h->fast[ib_peek(b, IF_FAST)];
    if (!e) e = ih_walk(h->count, h->symbol, ib_peek(b, 15), 15);  // longer codes
    if (!e) return -1;
    return ib_drop(b, e & 15) ? (int)(e >> 4) : -1;
}

// a compressed block's symbols into out[*pos..cap), distances at most `window` back
__device__ int if_codes(ibits* b, const ihuff* lit, const ihuff* dist, u8* out, i64 cap, i64* pos, i64 window) {
    for (;;) {
        int sym = ih_decode(b, lit);
        if (sym < 0) return IF_BAD;
        if (sym < 256) {
            if (*pos >= cap) return IF_OVERFLOW;
            if (IF_LANE == 0) out[*pos] = (u8)sym;
            (*pos)++;
            continue;
        }
        if (sym == 256) return IF_OK;
        sym -= 257;
        if (sym >= 29) return IF_BAD;  // 286 and 287
        u32 e;
        if (!ib_get(b, if_lext[sym], &e)) return IF_TRUNCATED;
        i64 len = if_lbase[sym] + e;
        int d = ih_decode(b, dist);
        if (d < 0 || d >= 30) return IF_BAD;
        if (!ib_get(b, if_dext[d], &e)) return IF_TRUNCATED;
        i64 back = if_dbase[d] + e;
        if (back > *pos || back > window) return IF_BAD;
        if (*pos + len > cap) return IF_OVERFLOW;
        u8* o = out + *pos;
        int m = (int)len, r = (int)back;
        IF_SYNC();
        for (int i = IF_LANE; i < m; i += IF_LANES) o[i] = o[(r >= m ? i : i % r) - r];
        *pos += len;
    }
}

// a dynamic block's code descriptions, into lit and dist (zlib's checks, one of them stricter)
__device__ int if_dynamic(ibits* b, ihuff* lit, ihuff* dist) {
    u32 v;
    u8 lens[320];
    if (!ib_get(b, 14, &v)) return IF_TRUNCATED;
    int nlen = (int)(v & 31) + 257, ndist = (int)((v >> 5) & 31) + 1, ncode = (int)(v >> 10) + 4;
    if (nlen > 286 || ndist > 30) return IF_BAD;
    for (int i = 0; i < 19; i++) lens[if_order[i]] = 0;
    for (int i = 0; i < ncode; i++) {
        if (!ib_get(b, 3, &v)) return IF_TRUNCATED;
        lens[if_order[i]] = (u8)v;
    }
    if (ih_build(lit, lens, 19) != 0) return IF_BAD;  // the code-length code: complete
    for (int at = 0; at < nlen + ndist;) {
        int sym = ih_decode(b, lit);
        if (sym < 0) return IF_BAD;
        if (sym < 16) {
            lens[at++] = (u8)sym;
            continue;
        }
        u8 value = 0;
        int times;
        if (sym == 16) {
            if (at == 0) return IF_BAD;
            value = lens[at - 1];
            if (!ib_get(b, 2, &v)) return IF_TRUNCATED;
            times = 3 + (int)v;
        } else if (sym == 17) {
            if (!ib_get(b, 3, &v)) return IF_TRUNCATED;
            times = 3 + (int)v;
        } else {
            if (!ib_get(b, 7, &v)) return IF_TRUNCATED;
            times = 11 + (int)v;
        }
        if (at + times > nlen + ndist) return IF_BAD;
        while (times--) lens[at++] = value;
    }
    if (lens[256] == 0) return IF_BAD;
    int r = ih_build(lit, lens, nlen);  // incomplete only as one code of one bit, as zlib allows
    if (r < 0 || (r > 0 && lit->max != 1)) return IF_BAD;
    r = ih_build(dist, lens + nlen, ndist);  // or no code at all (refused where a distance is read)
    if (r < 0 || (r > 0 && dist->max > 1)) return IF_BAD;
    return IF_OK;
}

__device__ void if_fixed(ihuff* lit, ihuff* dist) {
    u8 lens[288];
    for (int s = 0; s < 288; s++) lens[s] = s < 144 ? 8 : s < 256 ? 9 : s < 280 ? 7 : 8;
    ih_build(lit, lens, 288);
    for (int s = 0; s < 30; s++) lens[s] = 5;
    ih_build(dist, lens, 30);
}

// raw Deflate from b's position into out[*pos..cap), distances at most `window` back: its blocks to
// the last one, b then past it
__device__ int if_raw(ibits* b, u8* out, i64 cap, i64* pos, i64 window, ihuff* lit, ihuff* dist) {
    u32 last = 0;
    while (!last) {
        u32 type;
        if (!ib_get(b, 1, &last) || !ib_get(b, 2, &type)) return IF_TRUNCATED;
        int st;
        if (type == 0) {  // stored: from the next byte, LEN and its complement, LEN bytes
            i64 at = (ib_pos(b) + 7) >> 3;
            if (at + 4 > b->n) return IF_TRUNCATED;
            i64 len = b->s[at] | (b->s[at + 1] << 8);
            if ((len ^ 0xFFFF) != (b->s[at + 2] | (b->s[at + 3] << 8))) return IF_BAD;
            at += 4;
            if (at + len > b->n) return IF_TRUNCATED;
            if (*pos + len > cap) return IF_OVERFLOW;
            for (i64 i = IF_LANE; i < len; i += IF_LANES) out[*pos + i] = b->s[at + i];
            *pos += len;
            ib_start(b, b->s, b->n, at + len);
            continue;
        }
        if (type == 1) {
            if_fixed(lit, dist);
        } else if (type == 2) {
            st = if_dynamic(b, lit, dist);
            if (st) return st;
        } else {
            return IF_BAD;
        }
        st = if_codes(b, lit, dist, out, cap, pos, window);
        if (st) return st;
    }
    return IF_OK;
}

__device__ u32 if_adler32(const u8* d, i64 n) {
    u32 a = 1, s = 0;
    while (n > 0) {
        i64 k = n < 5552 ? n : 5552;  // the most bytes before s can overflow (zlib's NMAX)
        for (i64 i = 0; i < k; i++) {
            a += d[i];
            s += a;
        }
        a %= 65521u;
        s %= 65521u;
        d += k;
        n -= k;
    }
    return (s << 16) | a;
}

// the Adler-32 of x then y, from theirs and y's length (zlib's adler32_combine)
__device__ u32 if_adler32_join(u32 x, u32 y, i64 n) {
    const u32 base = 65521u;
    u32 rem = (u32)(n % base), a = x & 0xFFFF, s = (u32)(((u64)rem * a) % base);
    a += (y & 0xFFFF) + base - 1;
    s += (x >> 16) + (y >> 16) + base - rem;
    if (a >= base) a -= base;
    if (a >= base) a -= base;
    if (s >= base << 1) s -= base << 1;
    if (s >= base) s -= base;
    return (s << 16) | a;
}

// the standard CRC-32 table (reflected 0xEDB88320), entries t, t + nt, ...
__device__ void if_crc_table(u32* table, i64 t, i64 nt) {
    for (i64 i = t; i < 256; i += nt) {
        u32 c = (u32)i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        table[i] = c;
    }
}

__device__ u32 if_crc32(const u8* d, i64 n, const u32* table) {
    u32 c = 0xFFFFFFFFu;
    for (i64 i = 0; i < n; i++) c = table[(c ^ d[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

// a(x) b(x) modulo the CRC-32 polynomial, reflected (zlib's multmodp)
__device__ u32 if_crc_mul(u32 a, u32 b) {
    u32 p = 0;
    for (u32 m = 1u << 31; m; m >>= 1) {
        if (a & m) p ^= b;
        b = b & 1 ? (b >> 1) ^ 0xEDB88320u : b >> 1;
    }
    return p;
}

// the CRC-32 of x then y, from theirs and y's length (zlib's crc32_combine): x times x^(8n)
__device__ u32 if_crc32_join(u32 x, u32 y, i64 n) {
    u32 p = 1u << 31, t = 1u << 23;  // 1 and x^8
    for (u64 k = (u64)n; k; k >>= 1) {
        if (k & 1) p = if_crc_mul(t, p);
        t = if_crc_mul(t, t);
    }
    return if_crc_mul(p, x) ^ y;
}

// Adler-32 (crc 0) or CRC-32 (crc 1) of d[0..n): each lane a slice, joined by lane 0; every lane
// gets the sum
// the bytes of lane j's slice of n bytes, slices of `slice` bytes
__device__ __forceinline__ i64 if_slice_len(i64 n, i64 slice, int j) {
    i64 at = j * slice;
    return at >= n ? 0 : (n - at < slice ? n - at : slice);
}

__device__ u32 if_checksum(const u8* d, i64 n, int crc, const u32* table) {
    IF_SYNC();  // after every lane's writes
    i64 slice = (n + IF_LANES - 1) / IF_LANES, from = IF_LANE * slice, k = if_slice_len(n, slice, IF_LANE);
    u32 mine = crc ? if_crc32(d + from, k, table) : if_adler32(d + from, k);
    u32 sum = mine;
    for (int j = 1; j < IF_LANES; j++) {
        u32 theirs = IF_SHFL(mine, j);
        i64 len = if_slice_len(n, slice, j);
        sum = crc ? if_crc32_join(sum, theirs, len) : if_adler32_join(sum, theirs, len);
    }
    return IF_SHFL(sum, 0);
}

__device__ __forceinline__ u32 if_le32(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// gzip members as Python's gzip module reads them (several, zero padding after each), each member's
// CRC-32 and ISIZE checked; the members' output end to end
__device__ int if_gzip(const u8* s, i64 n, u8* out, i64 cap, i64* pos, const u32* table, ihuff* lit, ihuff* dist) {
    i64 at = 0;
    while (at < n) {
        if (n - at < 10) return IF_TRUNCATED;
        u8 flags = s[at + 3];
        if (s[at] != 0x1F || s[at + 1] != 0x8B || s[at + 2] != 8 || (flags & 0xE0)) return IF_BAD;
        i64 p = at + 10;
        if (flags & 4) {  // FEXTRA
            if (p + 2 > n) return IF_TRUNCATED;
            p += 2 + (s[p] | (s[p + 1] << 8));
        }
        for (int field = 8; field <= 16; field <<= 1)  // FNAME, FCOMMENT: to a zero byte
            if (flags & field) {
                while (p < n && s[p]) p++;
                p++;
            }
        if (flags & 2) p += 2;  // FHCRC: read past, not checked, as Python's reader does
        if (p > n) return IF_TRUNCATED;
        ibits b;
        ib_start(&b, s + p, n - p, 0);
        i64 got = 0;  // this member's bytes: its distances reach back no further
        int st = if_raw(&b, out + *pos, cap - *pos, &got, 32768, lit, dist);
        if (st) return st;
        at = p + ((ib_pos(&b) + 7) >> 3);
        if (at + 8 > n) return IF_TRUNCATED;
        if (if_le32(s + at) != if_checksum(out + *pos, got, 1, table)) return IF_CHECK;
        if (if_le32(s + at + 4) != (u32)got) return IF_CHECK;
        *pos += got;
        at += 8;
        while (at < n && s[at] == 0) at++;
    }
    return IF_OK;
}

// one stream of `wrapper` (IF_RAW, IF_ZLIB, IF_GZIP), src[0..n), into exactly dst[0..cap): a status
__device__ int inflate_item(const u8* src, i64 n, u8* dst, i64 cap, int wrapper, const u32* table, ihuff* lit,
                            ihuff* dist) {
    i64 pos = 0;
    int st;
    if (wrapper == IF_GZIP) {
        st = if_gzip(src, n, dst, cap, &pos, table, lit, dist);
    } else if (wrapper == IF_ZLIB) {
        if (n < 2) return IF_TRUNCATED;
        u32 cmf = src[0], flg = src[1];
        if ((cmf & 15) != 8 || (cmf >> 4) > 7 || ((cmf << 8) | flg) % 31 || (flg & 0x20)) return IF_BAD;
        ibits b;
        ib_start(&b, src + 2, n - 2, 0);
        st = if_raw(&b, dst, cap, &pos, (i64)1 << ((cmf >> 4) + 8), lit, dist);
        if (!st) {
            i64 at = 2 + ((ib_pos(&b) + 7) >> 3);
            if (at + 4 > n) return IF_TRUNCATED;
            u32 want = ((u32)src[at] << 24) | ((u32)src[at + 1] << 16) | ((u32)src[at + 2] << 8) | src[at + 3];
            if (want != if_checksum(dst, pos, 0, table)) return IF_CHECK;
        }
    } else {
        ibits b;
        ib_start(&b, src, n, 0);
        st = if_raw(&b, dst, cap, &pos, 32768, lit, dist);
    }
    if (st) return st;
    return pos == cap ? IF_OK : IF_SHORT;
}

#ifdef __CUDACC__

// a warp a stream: item i from src[i] (src_sizes[i] bytes) into exactly dst_sizes[i] bytes at dst[i]
extern "C" __global__ void __launch_bounds__(32 * IF_WARPS)
    inflate_batch(i64 n, const u64* src, const i64* src_sizes, const u64* dst, const i64* dst_sizes, int wrapper,
                  int* status) {
    __shared__ u32 table[256];
    __shared__ ihuff lit[IF_WARPS], dist[IF_WARPS];
    if_crc_table(table, threadIdx.x, blockDim.x);
    __syncthreads();
    int w = threadIdx.x >> 5;
    i64 i = (i64)blockIdx.x * IF_WARPS + w;
    if (i >= n) return;  // the whole warp
    int st = inflate_item((const u8*)src[i], src_sizes[i], (u8*)dst[i], dst_sizes[i], wrapper, table, &lit[w],
                          &dist[w]);
    if (IF_LANE == 0) status[i] = st;
}
#endif
