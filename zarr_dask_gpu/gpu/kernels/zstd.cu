// A zstd decoder that splits a frame's work by zstd block (RFC 8878), for chunks of many blocks.
//
// nvCOMP decodes a frame in one thread block, block after block: an 8 MiB zarr chunk is 64 zstd blocks
// and about a million sequences, decoded serially however many chunks run beside it. Here the frames'
// block headers are walked first (a thread a chunk), then every block's tables, literals and sequences
// are decoded at once (a thread a block; four a block's literals), the blocks are placed (a thread a
// chunk: output offsets, the repeat offsets each block starts with), and each chunk's literals and matches
// are copied by one of three copiers (a thread block a chunk, 256 sequences a step; a warp a chunk, a
// sequence at a time; or by waves across all blocks); frames that carry a content checksum are then hashed
// (XXH64, four threads a frame) and compared. A chunk may hold several frames and skippable frames, as
// libzstd reads them. Every read of the compressed bytes, the tables and the scratch is bounded by the
// sizes the walk checked, every loop by a count it checked, and every write lands inside the chunk's
// output (the decoded sizes are checked against the metadata before any byte is copied). The kernels
// are strict: what RFC 8878 allows but they do not take (offset codes over 26, windows over 128 MiB)
// is ZS_UNSUPPORTED, and what they refuse libzstd judges on the host (gpu/backend.py's _rescue).
//
// The same source compiles as C on the host (tests/codecs/test_zstd_c.py), where each kernel's items run one
// after another and the copier's steps are played sequentially.

#include "common.cuh"

#ifdef __CUDACC__
#define ZD __device__ __forceinline__
#else
#define ZD static
#endif

// The statuses (ZS_OK ... ZS_TRAILING), the copiers (ZS_BY_*), the thread blocks' threads (ZS_STEP,
// ZS_WARPS, ZS_*_THREADS), ZS_WAVES_MAX and the scratch's sizes (ZS_RECORD, ZS_HUF_MAX_BITS,
// ZS_FSE_ENTRIES) are defined by the compiler's caller, from gpu/kernels/shared.py: the launcher's own.
#if !defined(ZS_TRAILING) || !defined(ZS_BY_WARP) || !defined(ZS_STEP) || !defined(ZS_RECORD)
#error "zstd.cu is compiled with the defines of gpu/kernels/shared.py (kernels.module, shared.flags)"
#endif

#define ZS_BLOCK_MAX 131072
#define ZS_MAX_OFFSET_CODE 26  // offsets < 2^27 fit a sequence's 28-bit offset field (bit 27: symbolic)
#define ZS_HUF_ENTRIES (1 << ZS_HUF_MAX_BITS)
#define ZS_SYMBOLIC (1u << 27)  // a repeat offset known only relative to the block's incoming history

typedef struct {
    i64 src;      // offset of the block's content in its frame
    i64 lit;      // offset of its literals in the literal scratch
    i64 seq;      // index of its first sequence in the sequence scratch
    i64 out;      // offset of its output in its frame's output (zs_place)
    int chunk;  // its frame
    int type, size, dsize;  // block type (0 raw, 1 RLE, 2 compressed), Block_Size, decoded bytes
    int lit_type, lit_streams, lit_size, lit_hdr, lit_csize;
    int huf, huf_start, huf_bits;  // block whose Huffman table the literals use; streams' offset
    int nseq, seq_at, bits_at, modes;
    int def[3], fse_log[3];  // blocks whose LL, OF, ML tables this block uses; their accuracy logs
    u32 hist_in[3], hist_out[3];  // repeat offsets at the block's start and end (ZS_SYMBOLIC: relative)
    i64 fout;     // output offset of its frame's first byte (zs_place)
    i64 fcs;      // on a frame's first block: the frame's content size, -1 if the header has none
    u32 xxh;      // on a frame's last block: the content checksum, where the frame has one
    int fflags;   // ZS_FIRST, ZS_LAST, ZS_CHECKED
    int bmax;     // the most bytes it may decode to
    int window;   // its frame's window: the farthest a match may reach back (at most 2^31 - 1)
} zblock;
ZDG_STATIC_ASSERT(sizeof(zblock) == ZS_RECORD, "zblock is ZS_RECORD bytes, as the launcher lays it out");
#define ZS_FIRST 1    // the first block of its frame
#define ZS_LAST 2     // the last block of its frame
#define ZS_CHECKED 4  // ... of a frame with a content checksum (in xxh)

// Literal and match length codes: baseline | extra bits << 24 (RFC 8878 3.1.1.3.2.1), one load a code.
// The sequences kernel reads them from shared memory: each thread decodes its own block, and the
// constant cache serialises a warp's different indices.
typedef struct {
    u32 ll[36], ml[53];
} zlengths;
#define ZS_L(base, bits) ((base) | (bits) << 24)
__constant__ static const zlengths ZS_LENGTHS = {{
    ZS_L(0, 0), ZS_L(1, 0), ZS_L(2, 0), ZS_L(3, 0), ZS_L(4, 0), ZS_L(5, 0), ZS_L(6, 0), ZS_L(7, 0), ZS_L(8, 0),
    ZS_L(9, 0), ZS_L(10, 0), ZS_L(11, 0), ZS_L(12, 0), ZS_L(13, 0), ZS_L(14, 0), ZS_L(15, 0), ZS_L(16, 1),
    ZS_L(18, 1), ZS_L(20, 1), ZS_L(22, 1), ZS_L(24, 2), ZS_L(28, 2), ZS_L(32, 3), ZS_L(40, 3), ZS_L(48, 4),
    ZS_L(64, 6), ZS_L(128, 7), ZS_L(256, 8), ZS_L(512, 9), ZS_L(1024, 10), ZS_L(2048, 11), ZS_L(4096, 12),
    ZS_L(8192, 13), ZS_L(16384, 14), ZS_L(32768, 15), ZS_L(65536, 16)}, {
    ZS_L(3, 0), ZS_L(4, 0), ZS_L(5, 0), ZS_L(6, 0), ZS_L(7, 0), ZS_L(8, 0), ZS_L(9, 0), ZS_L(10, 0),
    ZS_L(11, 0), ZS_L(12, 0), ZS_L(13, 0), ZS_L(14, 0), ZS_L(15, 0), ZS_L(16, 0), ZS_L(17, 0), ZS_L(18, 0),
    ZS_L(19, 0), ZS_L(20, 0), ZS_L(21, 0), ZS_L(22, 0), ZS_L(23, 0), ZS_L(24, 0), ZS_L(25, 0), ZS_L(26, 0),
    ZS_L(27, 0), ZS_L(28, 0), ZS_L(29, 0), ZS_L(30, 0), ZS_L(31, 0), ZS_L(32, 0), ZS_L(33, 0), ZS_L(34, 0),
    ZS_L(35, 1), ZS_L(37, 1), ZS_L(39, 1), ZS_L(41, 1), ZS_L(43, 2), ZS_L(47, 2), ZS_L(51, 3), ZS_L(59, 3),
    ZS_L(67, 4), ZS_L(83, 4), ZS_L(99, 5), ZS_L(131, 7), ZS_L(259, 8), ZS_L(515, 9), ZS_L(1027, 10),
    ZS_L(2051, 11), ZS_L(4099, 12), ZS_L(8195, 13), ZS_L(16387, 14), ZS_L(32771, 15), ZS_L(65539, 16)}};
#undef ZS_L
__constant__ static const short LL_DEFAULT[36] = {4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2,
    2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1};
__constant__ static const short OF_DEFAULT[29] = {1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, -1, -1, -1, -1, -1};
__constant__ static const short ML_DEFAULT[53] = {1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1,
    -1, -1};

ZD int zs_hsb(u32 x) {  // index of the highest set bit; -1 for 0
#ifdef __CUDA_ARCH__
    return 31 - __clz(x);
#else
    int r = -1;
    while (x) { r++; x >>= 1; }
    return r;
#endif
}

ZD void zs_fail(int* status, int code) {
#ifdef __CUDA_ARCH__
    atomicCAS(status, 0, code);
#else
    if (*status == 0) *status = code;
#endif
}

ZD u64 zs_le(const u8* p, i64 n) {  // the little-endian value of n <= 8 bytes
    u64 v = 0;
    for (i64 i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

// ---- bit readers -----------------------------------------------------------------------------------

// Backward: a stream of n bytes whose last byte's highest set bit marks its end; reads take the bits
// below `off`, and bits before the stream's start read as zeros (the format's rule for the last states).
// `win` caches up to 64 bits from byte `lo`, refilled as `off` passes below it (literals, table headers).
typedef struct { const u8* s; i64 off, n, lo; u64 win; } zback;

ZD void zb_fill(zback* b, i64 bit) {  // a window holding bit `bit` and as many bits below it as fit
    i64 hi = (bit >> 3) + 1;
    if (hi > b->n) hi = b->n;
    b->lo = hi - 8 > 0 ? hi - 8 : 0;
    b->win = zs_le(b->s + b->lo, hi - b->lo);
}

ZD int zb_init(zback* b, const u8* s, i64 n) {
    if (n <= 0 || s[n - 1] == 0) return 0;
    b->s = s;
    b->n = n;
    b->off = n * 8 - 8 + zs_hsb(s[n - 1]);
    zb_fill(b, b->off - 1 > 0 ? b->off - 1 : 0);
    return 1;
}

ZD u32 zb_read(zback* b, int nbits) {  // nbits <= 26
    if (nbits == 0) return 0;
    b->off -= nbits;
    i64 o = b->off;
    int k = nbits, shift = 0;
    if (o < 0) {
        shift = (int)-o;
        k += (int)o;
        o = 0;
        if (k <= 0) return 0;
    }
    if (o < b->lo * 8) zb_fill(b, o + k - 1);
    u64 v = (b->win >> (o - b->lo * 8)) & ((1ull << k) - 1);
    return (u32)(v << shift);
}

// The sequences' backward stream, read as zstd's own decoder does: a 64-bit container, reloaded at whole
// bytes, and the count of its bits used from the top; `cur` is the container shifted left by that count,
// so that a read is two shifts of its top word and a shift of `cur`, and no read waits on another's
// count. Reads have no bounds test: the sequence loop's chain of dependent instructions is what bounds
// that kernel (a thread a zstd block). Streams under 8 bytes sit at the container's top with zeros
// below; a stream read to its exact start ends with `used == end` at byte 0, and over-reads of a corrupt
// stream read zeros, never loads.
typedef struct { const u8* s; int at, used, end, n; u64 cur; } zrev;

// Eight bytes at p, inside the stream: on the device as the two aligned words holding them (two loads,
// not eight) where those 16 bytes end inside the stream too; the first word may begin up to 7 bytes
// before p, which is inside the frame (a stream starts more than 7 bytes into it: magic, frame header,
// block header, sequences header). Near the stream's end, byte loads, out of line so that the
// sequence loop does not carry them.
#ifdef __CUDA_ARCH__
__device__ __forceinline__ u64 zs_words8(const u8* p) {
    const u64* w = (const u64*)((size_t)p & ~(size_t)7);
    int sh = (int)((size_t)p & 7) * 8;
    u64 lo = __ldg(w);  // the read-only path: the compressed bytes do not change under the kernel
    return sh ? (lo >> sh) | (__ldg(w + 1) << (64 - sh)) : lo;
}
__device__ __noinline__ u64 zs_bytes8(const u8* p) { return zs_le(p, 8); }
#endif

ZD int zr_init(zrev* r, const u8* s, int n) {
    if (n <= 0 || s[n - 1] == 0) return 0;
    r->s = s;
    r->n = n;
    r->at = n >= 8 ? n - 8 : 0;
    r->end = n >= 8 ? 64 : 8 * n;
    u64 bits = n >= 8 ? zs_le(s + n - 8, 8) : zs_le(s, n) << (64 - 8 * n);
    r->used = 8 - zs_hsb(s[n - 1]);  // the padding above the end mark, and the mark
    r->cur = bits << r->used;
    return 1;
}

ZD void zr_reload(zrev* r) {
    int k = r->used >> 3;
    if (k > r->at) k = r->at;
    if (k) {  // else `cur` holds what it would load (and a stream under 8 bytes has no more)
        r->at -= k;
        r->used -= 8 * k;
        u64 bits;
#ifdef __CUDA_ARCH__
        if (r->at + 16 <= r->n) bits = zs_words8(r->s + r->at);  // the two words end by at + 16
        else bits = zs_bytes8(r->s + r->at);
#else
        bits = zs_le(r->s + r->at, 8);
#endif
        r->cur = bits << r->used;  // used < 50: reloads come 42 bits apart at most, the first after 34
    }
}

// zr_reload where the reader is past the stream's last 16 bytes, so that the two words hold inside it:
// no branch (a reload of nothing loads the same bytes again, shifted as the reads left them).
ZD void zr_reload_mid(zrev* r) {
    int k = r->used >> 3;
    k = k < r->at ? k : r->at;
    r->at -= k;
    r->used -= 8 * k;
#ifdef __CUDA_ARCH__
    u64 bits = zs_words8(r->s + r->at);
#else
    u64 bits = zs_le(r->s + r->at, 8);
#endif
    r->cur = r->used < 64 ? bits << r->used : 0;  // 64 or more only in a stream read past its start
}

ZD u32 zr_read(zrev* r, int nbits) {  // nbits <= 31
    u32 v = ((u32)(r->cur >> 32) >> 1) >> (31 - nbits);
    r->cur <<= nbits;
    r->used += nbits;
    return v;
}

// Forward, little-endian bit order, within [s, s + n).
typedef struct { const u8* s; i64 n, bit; } zfwd;

ZD int zf_peek(const zfwd* f, int nbits, u32* v) {
    if (f->bit + nbits > f->n * 8) return 0;
    i64 first = f->bit >> 3, last = (f->bit + nbits - 1) >> 3;
    u64 x = zs_le(f->s + first, last - first + 1);
    *v = nbits ? (u32)((x >> (f->bit & 7)) & ((1ull << nbits) - 1)) : 0;
    return 1;
}

// ---- FSE tables ----------------------------------------------------------------------------------------
// Built into `t` (the literals' Huffman weights): entry = symbol | nbits << 8 | new-state base << 16; or
// into `packed` (the sequences' tables, half the room): entry = symbol | d << 6, where d is the symbol's
// count as the build numbers its states (below 2 << log; every sequences symbol is below 64), so that
// state s's next is (d << nb) - size + the next nb bits, nb = log - hsb(d). One of the two is given.

ZD int zs_fse_build(u32* t, u16* packed, const short* norm, int nsym, int log) {
    int size = 1 << log, high = size - 1;
    u16 next[256];
    for (int s = 0; s < nsym; s++) {
        if (norm[s] == -1) {
            if (t) t[high--] = (u32)s;
            else packed[high--] = (u16)s;
            next[s] = 1;
        }
    }
    int step = (size >> 1) + (size >> 3) + 3, mask = size - 1, pos = 0;
    for (int s = 0; s < nsym; s++) {
        if (norm[s] <= 0) continue;
        next[s] = (u16)norm[s];
        for (int i = 0; i < norm[s]; i++) {
            if (t) t[pos] = (u32)s;
            else packed[pos] = (u16)s;
            do { pos = (pos + step) & mask; } while (pos > high);
        }
    }
    if (pos != 0) return 0;
    for (int i = 0; i < size; i++) {
        u32 s = t ? t[i] & 0xff : packed[i], d = next[s]++;
        if (packed) {
            packed[i] = (u16)(s | d << 6);
            continue;
        }
        u32 nb = (u32)(log - zs_hsb(d));
        u32 base = ((d << nb) - (u32)size) & 0xffff;
        t[i] = s | (nb << 8) | (base << 16);
    }
    return 1;
}

// An FSE table description at f (read forward); the stream continues at the next whole byte.
ZD int zs_fse_header(zfwd* f, u32* t, u16* packed, int max_log, int max_sym, int* log_out) {
    u32 v;
    if (!zf_peek(f, 4, &v)) return 0;
    f->bit += 4;
    int log = (int)v + 5;
    if (log > max_log) return 0;
    int remaining = 1 << log, sym = 0;
    short norm[256];
    while (remaining > 0 && sym <= max_sym) {
        int bits = zs_hsb((u32)remaining + 1) + 1;
        if (!zf_peek(f, bits, &v)) return 0;
        u32 lower = (1u << (bits - 1)) - 1, threshold = (1u << bits) - 1 - ((u32)remaining + 1);
        if ((v & lower) < threshold) {
            v &= lower;
            f->bit += bits - 1;
        } else {
            if (v > lower) v -= threshold;
            f->bit += bits;
        }
        int p = (int)v - 1;
        remaining -= p < 0 ? -p : p;
        norm[sym++] = (short)p;
        if (p == 0) {
            for (;;) {
                if (!zf_peek(f, 2, &v)) return 0;
                f->bit += 2;
                for (u32 i = 0; i < v; i++) {
                    if (sym > max_sym) return 0;
                    norm[sym++] = 0;
                }
                if (v != 3) break;
            }
        }
    }
    if (remaining != 0) return 0;
    f->bit = (f->bit + 7) & ~7ll;
    *log_out = log;
    return zs_fse_build(t, packed, norm, sym, log);
}

// ---- frames and block headers (a thread a chunk) ------------------------------------------------------

// Walks chunk `d` of n bytes, its zstd frames one after another and skippable frames passed over, as
// libzstd does: counts its blocks, literal bytes and sequences into counts[0..2]; where `blocks` is
// given, also fills the chunk's records from blocks[base[0]] (literal scratch at base[1], sequences at
// base[2]). Every position is checked against n before it is read.
ZD int zs_walk(const u8* d, i64 n, i64 expected, int chunk, i64* counts, zblock* blocks, const i64* base) {
    i64 p = 0, nb = 0, lits = 0, seqs = 0, least = 0, known = 0;
    int all_known = 1;
    while (p < n) {
        if (p + 4 > n) return ZS_TRUNC;
        u32 magic = (u32)zs_le(d + p, 4);
        if ((magic & 0xFFFFFFF0u) == 0x184D2A50u) {  // a skippable frame: its 4-byte size, then data
            if (p + 8 > n) return ZS_TRUNC;
            i64 skip = (i64)zs_le(d + p + 4, 4);
            if (skip > n - p - 8) return ZS_TRUNC;
            p += 8 + skip;
            continue;
        }
        if (magic != 0xFD2FB528u) return nb ? ZS_TRAILING : ZS_HEADER;
        if (p + 5 > n) return ZS_TRUNC;
        u8 fhd = d[p + 4];
        if (fhd & 0x08) return ZS_HEADER;
        int single = (fhd >> 5) & 1, flag = fhd >> 6, dict = fhd & 3, checked = (fhd >> 2) & 1;
        int fcs = flag == 0 ? single : (1 << flag), dlen = dict == 3 ? 4 : dict;
        p += 5;
        i64 window = 0;
        if (!single) {
            if (p + 1 > n) return ZS_TRUNC;
            int wl = (d[p] >> 3) + 10;
            if (wl > 31) return ZS_HEADER;  // libzstd's ZSTD_WINDOWLOG_MAX
            window = (1ll << wl) + ((1ll << wl) >> 3) * (d[p] & 7);
            p++;
        }
        if (p + dlen + fcs > n) return ZS_TRUNC;
        if (dlen && zs_le(d + p, dlen)) return ZS_DICT;
        p += dlen;
        i64 content = -1;
        if (fcs) {
            u64 v = zs_le(d + p, fcs) + (fcs == 2 ? 256 : 0);
            if (v > (u64)(expected - known)) return ZS_SIZE;  // more than the chunk's room
            content = (i64)v;
            known += content;
        } else {
            all_known = 0;
        }
        p += fcs;
        if (single) window = content;
        // libzstd, as numcodecs calls it, refuses windows over 128 MiB that a frame states: the host's
        if (!single && window > (1ll << 27)) return ZS_UNSUPPORTED;
        int bmax = window < ZS_BLOCK_MAX ? (int)window : ZS_BLOCK_MAX;
        i64 huf = -1, def[3] = {-1, -1, -1};  // tables a block may repeat: its frame's own
        int first = 1;
        for (;;) {
            if (p + 3 > n) return ZS_TRUNC;
            u32 bh = d[p] | (d[p + 1] << 8) | (d[p + 2] << 16);
            p += 3;
            int last = bh & 1, type = (bh >> 1) & 3, size = (int)(bh >> 3);
            if (type == 3 || size > ZS_BLOCK_MAX) return ZS_CORRUPT;
            if (size > bmax) return ZS_CORRUPT;  // libzstd's blockSizeMax (what it reads, the host decides)
            i64 clen = type == 1 ? 1 : size;
            if (p + clen > n) return ZS_TRUNC;
            if (last && checked && p + clen + 4 > n) return ZS_TRUNC;
            i64 me = blocks ? base[0] + nb : 0;
            zblock r;
            r.src = p;
            r.chunk = chunk;
            r.type = type;
            r.size = size;
            r.dsize = type == 2 ? 0 : size;
            r.lit_type = r.lit_streams = r.lit_size = r.lit_hdr = r.lit_csize = 0;
            r.huf = -1;
            r.huf_start = r.huf_bits = r.nseq = r.seq_at = r.bits_at = r.modes = 0;
            r.lit = (blocks ? base[1] : 0) + lits;
            r.seq = (blocks ? base[2] : 0) + seqs;
            r.out = r.fout = 0;
            r.fcs = first ? content : -1;
            r.fflags = (first ? ZS_FIRST : 0) | (last ? ZS_LAST : 0) | (last && checked ? ZS_CHECKED : 0);
            r.xxh = last && checked ? (u32)zs_le(d + p + clen, 4) : 0;
            r.bmax = bmax;
            r.window = window < 0x7FFFFFFF ? (int)window : 0x7FFFFFFF;
            for (int k = 0; k < 3; k++) {
                r.def[k] = -1;
                r.fse_log[k] = 0;
                r.hist_in[k] = r.hist_out[k] = ZS_SYMBOLIC | ((u32)k << 25);
            }
            if (type != 2) {
                least += size;
            } else {
                const u8* b = d + p;
                if (size < 2) return ZS_CORRUPT;
                int lt = b[0] & 3, sf = (b[0] >> 2) & 3, hs, rs, cs, streams = 1;
                if (lt < 2) {
                    hs = sf == 1 ? 2 : (sf == 3 ? 3 : 1);
                    if (hs > size) return ZS_CORRUPT;
                    rs = sf == 1 ? (b[0] >> 4) + (b[1] << 4)
                                 : (sf == 3 ? (b[0] >> 4) + (b[1] << 4) + (b[2] << 12) : b[0] >> 3);
                    cs = lt == 0 ? rs : 1;
                } else {
                    hs = sf < 2 ? 3 : (sf == 2 ? 4 : 5);
                    if (hs > size) return ZS_CORRUPT;
                    u64 h = zs_le(b, hs);
                    if (sf < 2) {
                        rs = (int)((h >> 4) & 0x3FF);
                        cs = (int)((h >> 14) & 0x3FF);
                    } else if (sf == 2) {
                        rs = (int)((h >> 4) & 0x3FFF);
                        cs = (int)((h >> 18) & 0x3FFF);
                    } else {
                        rs = (int)((h >> 4) & 0x3FFFF);
                        cs = (int)((h >> 22) & 0x3FFFF);
                    }
                    streams = sf == 0 ? 1 : 4;
                    if (lt == 2) huf = me;
                    else if (huf < 0) return ZS_CORRUPT;  // a repeated Huffman table with none before
                    r.huf = (int)huf;
                    if (cs < 1 || (streams == 4 && cs < 10)) return ZS_CORRUPT;
                    // libzstd: four streams hold 6 literals or more (MIN_LITERALS_FOR_4_STREAMS); an empty
                    // one must be its end mark alone, which no encoder writes: refused, the host decides
                    if (rs == 0 || (streams == 4 && rs < 6)) return ZS_CORRUPT;
                }
                if (rs > bmax || (i64)hs + cs >= size) return ZS_CORRUPT;
                int q = hs + cs, nseq, at;
                int b0 = b[q];
                if (b0 < 128) {
                    nseq = b0;
                    at = q + 1;
                } else if (b0 < 255) {
                    if (q + 2 > size) return ZS_CORRUPT;
                    nseq = ((b0 - 128) << 8) + b[q + 1];
                    at = q + 2;
                } else {
                    if (q + 3 > size) return ZS_CORRUPT;
                    nseq = b[q + 1] + (b[q + 2] << 8) + 0x7F00;
                    at = q + 3;
                }
                r.lit_type = lt;
                r.lit_streams = streams;
                r.lit_size = rs;
                r.lit_hdr = hs;
                r.lit_csize = cs;
                r.nseq = nseq;
                if (nseq) {
                    if (at >= size) return ZS_CORRUPT;
                    int modes = b[at++];
                    if (modes & 3) return ZS_CORRUPT;
                    for (int k = 0; k < 3; k++) {
                        int m = (modes >> (6 - 2 * k)) & 3;
                        if (m != 3) def[k] = me;
                        else if (def[k] < 0) return ZS_CORRUPT;  // a repeated table with none before
                        r.def[k] = (int)def[k];
                    }
                    r.modes = modes;
                } else if (at != size) {
                    return ZS_CORRUPT;
                }
                r.seq_at = at;
                least += (i64)rs + 3 * (i64)nseq;  // every match is 3 bytes or more
                if ((i64)rs + 3 * (i64)nseq > ZS_BLOCK_MAX) return ZS_CORRUPT;
                lits += rs;
                seqs += nseq;
            }
            if (least > expected) return ZS_SIZE;
            if (blocks) blocks[me] = r;
            nb++;
            first = 0;
            p += clen;
            if (last) break;
        }
        if (checked) p += 4;
    }
    if (all_known && known != expected) return ZS_SIZE;
    if (nb == 0) return expected ? ZS_SIZE : ZS_OK;
    counts[0] = nb;
    counts[1] = lits;
    counts[2] = seqs;
    return ZS_OK;
}

// ---- a block's tables (a thread a block) -----------------------------------------------------------------

ZD int zs_huf_table(const u8* b, int n, u16* t, int* bits_out, int* used) {
    if (n < 1) return 0;
    int h = b[0], nw;
    u8 w[256];
    if (h >= 128) {
        nw = h - 127;
        if (1 + (nw + 1) / 2 > n) return 0;
        for (int i = 0; i < nw; i++) w[i] = i % 2 == 0 ? b[1 + i / 2] >> 4 : b[1 + i / 2] & 15;
        *used = 1 + (nw + 1) / 2;
    } else {
        if (h == 0 || 1 + h > n) return 0;
        zfwd f = {b + 1, h, 0};
        u32 ft[128];
        int log;
        // libzstd's limits for the weights' table: accuracy log 6, symbols 0 to 11 (its workspace allows
        // more at log 5; no weight over 11 is taken here)
        if (!zs_fse_header(&f, ft, 0, 6, ZS_HUF_MAX_BITS, &log)) return 0;
        zback s;
        if (!zb_init(&s, b + 1 + f.bit / 8, h - f.bit / 8)) return 0;
        u32 st[2];  // two interleaved states take turns; once the stream runs out, the other's symbol ends it
        st[0] = zb_read(&s, log);
        st[1] = zb_read(&s, log);
        if (s.off < 0) return 0;  // libzstd: the two states' bits must lie in the stream
        nw = 0;
        for (int k = 0;; k ^= 1) {
            if (nw >= 255) return 0;
            w[nw++] = (u8)(ft[st[k]] & 0xff);
            st[k] = (ft[st[k]] >> 16) + zb_read(&s, (ft[st[k]] >> 8) & 0xff);
            if (s.off < 0) {
                if (nw >= 255) return 0;
                w[nw++] = (u8)(ft[st[k ^ 1]] & 0xff);
                break;
            }
        }
        *used = 1 + h;
    }
    u32 sum = 0;
    for (int i = 0; i < nw; i++) {
        if (w[i] > ZS_HUF_MAX_BITS) return 0;
        sum += w[i] ? 1u << (w[i] - 1) : 0;
    }
    if (sum == 0) return 0;
    int maxb = zs_hsb(sum) + 1;
    u32 left = (1u << maxb) - sum;
    if (left & (left - 1)) return 0;
    w[nw] = (u8)(zs_hsb(left) + 1);
    int nsym = nw + 1;
    if (maxb > ZS_HUF_MAX_BITS) return 0;
    int ones = 0;  // libzstd's rule (HUF_readStats): two weights of 1 or more, an even count of them
    for (int i = 0; i < nsym; i++) ones += w[i] == 1;
    if (ones < 2 || (ones & 1)) return 0;
    u8 nbits[256];
    u32 rank_count[ZS_HUF_MAX_BITS + 2], rank_idx[ZS_HUF_MAX_BITS + 2];
    for (int i = 0; i <= ZS_HUF_MAX_BITS + 1; i++) rank_count[i] = 0;
    int tb = 0;
    for (int i = 0; i < nsym; i++) {
        nbits[i] = w[i] ? (u8)(maxb + 1 - w[i]) : 0;
        if (nbits[i] > tb) tb = nbits[i];
        rank_count[nbits[i]]++;
    }
    rank_idx[tb] = 0;
    for (int i = tb; i >= 1; i--) {
        rank_idx[i - 1] = rank_idx[i] + rank_count[i] * (1u << (tb - i));
        for (u32 k = rank_idx[i]; k < rank_idx[i - 1]; k++) t[k] = (u16)(i << 8);
    }
    if (rank_idx[0] != (1u << tb)) return 0;
    for (int i = 0; i < nsym; i++) {
        if (!nbits[i]) continue;
        u32 code = rank_idx[nbits[i]], len = 1u << (tb - nbits[i]);
        for (u32 k = code; k < code + len; k++) t[k] = (u16)((t[k] & 0xff00) | i);
        rank_idx[nbits[i]] += len;
    }
    *bits_out = tb;
    return 1;
}

ZD void zs_tables_item(i64 i, const u8* const* src, zblock* blocks, u16* huf, u16* fse, int* status) {
    zblock* r = blocks + i;
    if (r->type != 2 || status[r->chunk]) return;
    const u8* b = src[r->chunk] + r->src;
    if (r->lit_type >= 2) {
        int used = 0;
        if (r->lit_type == 2 &&
            !zs_huf_table(b + r->lit_hdr, r->lit_csize, huf + i * ZS_HUF_ENTRIES, &r->huf_bits, &used)) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
        r->huf_start = r->lit_hdr + used;
        int room = r->lit_hdr + r->lit_csize - r->huf_start;
        if (room < (r->lit_streams == 4 ? 10 : 1)) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
    }
    if (!r->nseq) return;
    zfwd f = {b + r->seq_at, r->size - r->seq_at, 0};
    const short* dflt[3] = {LL_DEFAULT, OF_DEFAULT, ML_DEFAULT};
    const int dn[3] = {36, 29, 53}, dlog[3] = {6, 5, 6}, maxlog[3] = {9, 8, 9}, maxsym[3] = {35, 31, 52};
    for (int k = 0; k < 3; k++) {
        int m = (r->modes >> (6 - 2 * k)) & 3;
        u16* t = fse + (i * 3 + k) * ZS_FSE_ENTRIES;
        int ok = 1;
        if (m == 0) {
            short norm[53];
            for (int s = 0; s < dn[k]; s++) norm[s] = dflt[k][s];
            ok = zs_fse_build(0, t, norm, dn[k], dlog[k]);
            r->fse_log[k] = dlog[k];
        } else if (m == 1) {
            u32 v = 0;
            ok = zf_peek(&f, 8, &v) && (int)v <= maxsym[k];
            f.bit += 8;
            t[0] = (u16)(v | 1u << 6);  // one state: d 1, no bits, next state 0
            r->fse_log[k] = 0;
        } else if (m == 2) {
            ok = zs_fse_header(&f, 0, t, maxlog[k], maxsym[k], &r->fse_log[k]);
        } else {
            r->fse_log[k] = -1;  // blocks[def].fse_log, read when decoding
        }
        if (!ok) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
    }
    r->bits_at = r->seq_at + (int)(f.bit / 8);
    if (r->bits_at >= r->size) zs_fail(status + r->chunk, ZS_CORRUPT);
}

// ---- literals (four threads a block) -------------------------------------------------------------------

ZD void zs_lit(u8* at, const u16* t, u32* state, zback* bs, u32 mask) {  // a literal, by the bytewise reader
    u16 e = t[*state];
    int nb = e >> 8;
    *at = (u8)(e & 0xff);
    *state = ((*state << nb) + zb_read(bs, nb)) & mask;
}

ZD void zs_put4(u8* at, u32 word) {  // four literals at `at`, aligned to 4
#ifdef __CUDA_ARCH__
    *(u32*)at = word;
#else
    for (int j = 0; j < 4; j++) at[j] = (u8)(word >> (8 * j));
#endif
}

// `room`: the block's Huffman table copied where the loop reads it faster (shared memory on the device),
// or none: the table in `huf`.
ZD void zs_literals_item(i64 i, const u8* const* src, const zblock* blocks, const u16* huf, u8* lits,
                         int* status, const u16* room) {
    const zblock* r = blocks + i / 4;
    int s = (int)(i % 4);
    if (r->type != 2 || status[r->chunk] || !r->lit_size) return;
    const u8* b = src[r->chunk] + r->src;
    u8* out = lits + r->lit;
    int n = r->lit_size, seg = (n + 3) / 4;
    if (r->lit_type < 2) {  // raw or RLE: each thread a quarter
        int lo = s * seg, hi = lo + seg < n ? lo + seg : n;
        for (int k = lo; k < hi; k++) out[k] = r->lit_type == 0 ? b[r->lit_hdr + k] : b[r->lit_hdr];
        return;
    }
    if (r->lit_streams == 1 && s) return;
    const zblock* h = blocks + r->huf;
    const u16* t = room ? room : huf + (i64)r->huf * ZS_HUF_ENTRIES;
    int tb = h->huf_bits;
    const u8* p = b + r->huf_start;
    int total = r->lit_hdr + r->lit_csize - r->huf_start, start = 0, len = total, lo = 0, count = n;
    if (r->lit_streams == 4) {
        int l0 = p[0] | (p[1] << 8), l1 = p[2] | (p[3] << 8), l2 = p[4] | (p[5] << 8);
        int l3 = total - 6 - l0 - l1 - l2;
        if (l3 < 1) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
        int lens[4] = {l0, l1, l2, l3};
        start = 6;
        for (int k = 0; k < s; k++) start += lens[k];
        len = lens[s];
        lo = s * seg;
        count = s < 3 ? seg : n - 3 * seg;
        if (count < 0) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
    }
    zback bs;
    if (!zb_init(&bs, p + start, len)) {
        zs_fail(status + r->chunk, ZS_CORRUPT);
        return;
    }
    u32 mask = (1u << tb) - 1, state = zb_read(&bs, tb);
    const u8* in = p + start;
    u8* at = out + lo;
    int k = 0;
    // The bytewise reader refills its window each lane at its own literal: nearly every step of a
    // warp ran a lane's refill. In the stream's middle, four literals a load of the 64 bits from 56 to
    // 63 below the read position (four reads take 44 at most), every lane at the same step; the load's
    // 16 aligned bytes on the device lie inside the stream. The four go out in one aligned store: a byte
    // a store made a memory transaction a literal (8 a store measured no faster, docs/performance.md).
    for (; k < count && ((bs.off >> 3) + 9 > len || ((u64)(at + k) & 3)); k++)
        zs_lit(at + k, t, &state, &bs, mask);
    for (i64 off = bs.off; k + 4 <= count && off >= 128; k += 4) {
        i64 w = (off >> 3) - 7;
#ifdef __CUDA_ARCH__
        u64 win = zs_words8(in + w);
#else
        u64 win = zs_le(in + w, 8);
#endif
        u32 word = 0;
        for (int u = 0; u < 4; u++) {
            u16 e = t[state];
            int nb = e >> 8;
            off -= nb;
            state = ((state << nb) + (u32)((win >> (off - 8 * w)) & ((1u << nb) - 1))) & mask;
            word |= (u32)(e & 0xff) << (8 * u);
        }
        zs_put4(at + k, word);
        bs.off = off;  // the bytewise reader's window still holds what lies below its end
    }
    for (; k < count; k++) zs_lit(at + k, t, &state, &bs, mask);
    if (bs.off != -tb) zs_fail(status + r->chunk, ZS_CORRUPT);
}

// Entries of block i's Huffman table that its literals read (2^bits), or 0 when they read none: the
// block is not compressed, its chunk failed, its literals are raw or RLE, or the bits are out of range
// (then the literals' own walk fails it).
ZD int zs_huf_entries(const zblock* blocks, i64 i, const int* status) {
    const zblock* r = blocks + i;
    if (r->type != 2 || !r->lit_size || r->lit_type < 2 || status[r->chunk]) return 0;
    int tb = blocks[r->huf].huf_bits;
    return tb >= 1 && tb <= ZS_HUF_MAX_BITS ? 1 << tb : 0;
}

// ---- sequences (a thread a block) --------------------------------------------------------------------------
// A sequence: literal length (18 bits), match length (18 bits), offset (28 bits: the offset, or
// ZS_SYMBOLIC | slot << 25 | d for "slot j of the block's incoming repeat offsets, minus d").
// Each thread first copies its block's three FSE tables (packed: 2.5 KiB) into its own `room`
// (shared memory on the device): the loop's table lookups are the links of its chain of dependent
// loads, and a batch's tables in global memory (all blocks in flight) far outgrow the L2 cache (read
// there, through the caches, a large batch decodes markedly slower than from rooms: docs/performance.md).

#define ZS_SEQ_ROOM (2 * ZS_FSE_ENTRIES + 256)  // LL and ML tables (accuracy log 9), OF's (log 8)

ZD u32 zs_minus1(u32 h) { return (h & ZS_SYMBOLIC) ? h + 1 : (h ? h - 1 : 0); }

// A block's sequence decoder between two sequences: the bit reader, the three states, the repeat
// offsets, the sums, and what went wrong (ZS_CORRUPT, or ZS_UNSUPPORTED for an offset code over 26).
typedef struct {
    zrev bs;
    u32 sl, so, sm, h0, h1, h2, litsum, made;
    int bad;
} zseqs;

// One sequence into `out`. Branch-free but for the second reload: the loop's chain is its dependent
// loads and shifts, and a branch would close the compiler's schedule around it. `mid`: the reader is
// past the stream's last 16 bytes (zr_reload_mid); `last`: no states' bits are read (the states it
// leaves are not used). Symbols were checked against their codes' ranges when the tables were placed.
ZD void zs_sequence(zseqs* d, const u16* const* t, const int* log, const zlengths* len, int mid, int last,
                    u32 lit_size, u32 most, u64* out) {
    u32 el = t[0][d->sl], eo = t[1][d->so], em = t[2][d->sm];
    u32 lc = el & 63, oc = eo & 63, mc = em & 63;
    if (oc > ZS_MAX_OFFSET_CODE) {  // a window over 128 MiB: libzstd's, on the host
        d->bad = ZS_UNSUPPORTED;
        oc = ZS_MAX_OFFSET_CODE;  // the rest of the step reads what it may, and the loop ends
    }
    u32 lx = len->ll[lc], mx = len->ml[mc];
    if (mid) zr_reload_mid(&d->bs);
    else zr_reload(&d->bs);  // 57 bits or more: the offset's 26 and the match length's 16
    u32 ofv = (1u << oc) + zr_read(&d->bs, (int)oc);
    u32 ml = (mx & 0xffffff) + zr_read(&d->bs, (int)(mx >> 24));
    const u32 dl = el >> 6, dm = em >> 6, d_o = eo >> 6;
    const int nl = log[0] - zs_hsb(dl), nm = log[2] - zs_hsb(dm), no = log[1] - zs_hsb(d_o);
    // the literal length's bits and the states' (at most 16 and 26): reloaded only when the container
    // holds fewer, as libzstd does, so that most sequences wait on one load, not two
    if (d->bs.used + (int)(lx >> 24) + nl + nm + no > 64) {
        if (mid) zr_reload_mid(&d->bs);
        else zr_reload(&d->bs);
    }
    u32 ll = (lx & 0xffffff) + zr_read(&d->bs, (int)(lx >> 24));
    u32 v = zr_read(&d->bs, last ? 0 : nl + nm + no);  // the states' bits in one read: LL's, ML's, OF's
    d->sl = (dl << nl) - (1u << log[0]) + (v >> (nm + no));
    d->sm = (dm << nm) - (1u << log[2]) + ((v >> no) & ((1u << nm) - 1));
    d->so = (d_o << no) - (1u << log[1]) + (v & ((1u << no) - 1));
    // repeat offsets (RFC 8878 3.1.2.5): an offset value of 1-3 picks one, shifted by one when the
    // literal length is 0; the history shifts past the one taken
    u32 idx = ofv - 1 + (ll == 0), m1 = zs_minus1(d->h0);  // idx 0-3 where ofv is 1-3
    u32 rep = (idx & 2) ? ((idx & 1) ? m1 : d->h2) : ((idx & 1) ? d->h1 : d->h0);
    int fresh = ofv > 3;
    u32 off = fresh ? ofv - 3 : rep;
    d->h2 = fresh || idx >= 2 ? d->h1 : d->h2;
    d->h1 = fresh || idx >= 1 ? d->h0 : d->h1;
    d->h0 = off;
    d->litsum += ll;
    d->made += ml;
    if (d->litsum > lit_size || d->made > most) d->bad = d->bad ? d->bad : ZS_CORRUPT;
    *out = (u64)ll | ((u64)ml << 18) | ((u64)off << 36);
}

ZD void zs_sequences_item(i64 i, const u8* const* src, zblock* blocks, const u16* fse, const zlengths* len,
                          u64* seqs, int* status, u16* room) {
    zblock* r = blocks + i;
    if (r->type != 2 || status[r->chunk]) return;
    zseqs d;
    d.h0 = r->hist_in[0];
    d.h1 = r->hist_in[1];
    d.h2 = r->hist_in[2];
    i64 total = r->lit_size;
    const int nseq = r->nseq;
    if (nseq) {
        const u8* b = src[r->chunk] + r->src;
        const u16* t[3];
        int log[3];
        const int at[3] = {0, 2 * ZS_FSE_ENTRIES, ZS_FSE_ENTRIES}, logmax[3] = {9, 8, 9};  // LL, OF, ML
        const u32 symmax[3] = {35, 31, 52};
        u32 over = 0;
        for (int k = 0; k < 3; k++) {
            const u16* table = fse + ((i64)r->def[k] * 3 + k) * ZS_FSE_ENTRIES;
            log[k] = blocks[r->def[k]].fse_log[k];
            if (log[k] < 0 || log[k] > logmax[k]) {  // the bound again: the table must fit its room
                zs_fail(status + r->chunk, ZS_CORRUPT);
                return;
            }
            for (int e = 0; e < (1 << log[k]); e++) {  // and its symbols must index their lengths tables
                u16 v = table[e];
                over |= (u32)((v & 63) > symmax[k]);
                room[at[k] + e] = v;
            }
            t[k] = room + at[k];
        }
        if (over || !zr_init(&d.bs, b + r->bits_at, r->size - r->bits_at)) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
        d.sl = zr_read(&d.bs, log[0]);
        d.so = zr_read(&d.bs, log[1]);
        d.sm = zr_read(&d.bs, log[2]);
        // 32-bit sums: a block's literals and output are at most 128 KiB (its walk checked), and each
        // sum is tested against its bound after every sequence's lengths (each under 2^17)
        const u32 lit_size = (u32)r->lit_size, most = (u32)r->bmax;
        d.litsum = 0;
        d.made = (u32)total;
        d.bad = 0;
        u64* out = seqs + r->seq;
        int k = 0;
        for (; k < nseq - 1 && !d.bad && d.bs.at + 16 > d.bs.n; k++)  // the stream's last 16 bytes
            zs_sequence(&d, t, log, len, 0, 0, lit_size, most, out + k);
        for (; k < nseq - 1 && !d.bad; k++) zs_sequence(&d, t, log, len, 1, 0, lit_size, most, out + k);
        if (!d.bad) zs_sequence(&d, t, log, len, 0, 1, lit_size, most, out + k);
        if (d.bad) {
            zs_fail(status + r->chunk, d.bad);
            return;
        }
        total = d.made;
        zr_reload(&d.bs);  // the loop may end before a reload it did not need: the stream's start is at 0
        if (d.bs.at != 0 || d.bs.used != d.bs.end) {
            zs_fail(status + r->chunk, ZS_CORRUPT);
            return;
        }
    }
    r->dsize = (int)total;
    r->hist_out[0] = d.h0;
    r->hist_out[1] = d.h1;
    r->hist_out[2] = d.h2;
}

// ---- placing a frame's blocks (a thread a frame) -----------------------------------------------------------

ZD u32 zs_resolve(u32 h, const u32* in) {
    if (!(h & ZS_SYMBOLIC)) return h;
    i64 v = (i64)in[(h >> 25) & 3] - (i64)(h & 0x1FFFFFF);
    return v > 0 ? (u32)v : 0;  // 0: an offset no match may use
}

// Whether a match of offset `off` starting at byte `at` of block r's output is one to refuse: offset 0
// (none), or reaching back past its frame's start or past the frame's window (libzstd streaming a frame
// keeps only the window, so it would copy other bytes)
ZD int zs_bad_match(const zblock* r, i64 at, u32 off) {
    return off == 0 || (i64)off > r->window || r->out - r->fout + at - (i64)off < 0;
}

ZD void zs_place_item(i64 c, const i64* base, const i64* counts, zblock* blocks, const i64* expected,
                      int* status) {
    if (status[c]) return;
    u32 hist[3] = {1, 4, 8};
    i64 at = 0, fout = 0, fcs = -1;
    for (i64 i = base[3 * c]; i < base[3 * c] + counts[3 * c]; i++) {
        zblock* r = blocks + i;
        if (r->fflags & ZS_FIRST) {  // a frame starts afresh: no history, its own repeat offsets
            hist[0] = 1;
            hist[1] = 4;
            hist[2] = 8;
            fout = at;
            fcs = r->fcs;
        }
        r->out = at;
        r->fout = fout;
        at += r->dsize;
        u32 next[3];
        for (int k = 0; k < 3; k++) {
            r->hist_in[k] = hist[k];
            next[k] = zs_resolve(r->hist_out[k], hist);
        }
        for (int k = 0; k < 3; k++) hist[k] = next[k];
        if ((r->fflags & ZS_LAST) && fcs >= 0 && at - fout != fcs) zs_fail(status + c, ZS_SIZE);
    }
    if (at != expected[c]) zs_fail(status + c, ZS_SIZE);
}

// ---- copying: a thread block a frame, ZS_STEP sequences a step ---------------------------------------------------
// Most of a large chunk's output bytes may come, through chains of matches, from earlier zstd blocks (the
// window is 2 MiB), so a frame is copied in order. Within a step no byte waits for another: each byte's
// value is found through the step's table of sequences (a literal, or a byte written before the step),
// so the step's bytes are written in any order, by any thread.

#ifndef ZS_DEFER
#define ZS_DEFER 2048  // room for a step's bytes whose source lies inside it (the tests build smaller)
#endif
// Bytes [at, at + n) of a chunk, thread t of `threads`: a raw run from `from`, or (rle) its first byte
ZD void zs_put_run(u8* chunk, i64 at, const u8* from, i64 n, int rle, int t, int threads) {
    for (i64 x = t; x < n; x += threads) chunk[at + x] = rle ? from[0] : from[x];
}

typedef struct {
    int ostart[ZS_STEP + 1];  // a sequence's output offset in the step; ostart[n]: the step's length
    int mstart[ZS_STEP];      // its match's offset in the step
    int lstart[ZS_STEP];      // its literals' offset in the block's literals
    int off[ZS_STEP];
    int n;
    int ndefer, defer[ZS_DEFER];  // bytes whose source lies inside the step: p | j << 17
} zstep;

ZD int zs_find(const zstep* s, int hi, int p) {  // the sequence j <= hi holding step byte p
    int lo = 0;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (s->ostart[mid] <= p) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

// Where byte p of the step, which lies in sequence j, comes from: a literal, or a byte written before the
// step (`before` points at the step's start). A match's byte comes from its first period (it may overlap
// itself); a source inside the step is looked up again, further back each time. Shared memory only.
ZD const u8* zs_src(const zstep* s, int j, int p, const u8* lit, const u8* before) {
    for (;;) {
        int m = s->mstart[j];
        if (p < m) return lit + s->lstart[j] + p - s->ostart[j];
        int o = s->off[j], q = p - m < o ? p - o : m - o + (p - m) % o;
        if (q < 0) return before + q;
        j = zs_find(s, j, q);
        p = q;
    }
}

ZD int zs_defer(zstep* s, int p, int j) {  // 0 when the list is full
#ifdef __CUDA_ARCH__
    int k = atomicAdd(&s->ndefer, 1);
#else
    int k = s->ndefer++;
#endif
    if (k >= ZS_DEFER) return 0;
    s->defer[k] = p | (j << 17);
    return 1;
}

// Bytes [p0, p1) of the step, from sequence j on, eight at a time: the sources of those outside the
// step (a literal, or a byte written before the step) found, then read together (the loads in flight
// at once), then written. The others are deferred, so that the few lookups inside a step (a small
// fraction of its bytes on typical data) do not hold up every lane of a warp, each lane at its own byte
// (past the list's room, chased here). The sequence's bounds, offset and literals stay in registers
// while p moves through it, and a match's source moves with p, back by the offset at the end of a
// period: a byte costs no lookup in the step's table and no division.
ZD void zs_put(zstep* s, int j, int p0, int p1, const u8* lit, u8* at) {
    int e = s->ostart[j + 1], m = s->mstart[j], off = s->off[j];
    const u8* l = lit + s->lstart[j] - s->ostart[j];  // the literal of step byte x < m: l[x]
    // the source of the next byte of the match: its first period's, repeated where it overlaps itself
    int q = p0 < m ? m - off : (p0 - m < off ? p0 - off : m - off + (p0 - m) % off);
    for (int p = p0; p < p1; p += 8) {
        const u8* from[8];
        for (int u = 0; u < 8; u++) {
            int x = p + u;
            const u8* f = 0;
            if (x < p1) {
                if (x == e) {  // the next sequence (none is empty: a match is 3 bytes or more)
                    j++;
                    e = s->ostart[j + 1];
                    m = s->mstart[j];
                    off = s->off[j];
                    l = lit + s->lstart[j] - s->ostart[j];
                    q = m - off;
                }
                if (x < m) {
                    f = l + x;
                } else {
                    if (q < 0) f = at + q;
                    else if (!zs_defer(s, x, j)) f = zs_src(s, j, x, lit, at);
                    q = q + 1 == m ? m - off : q + 1;
                }
            }
            from[u] = f;
        }
        u8 v[8];
        for (int u = 0; u < 8; u++) v[u] = from[u] ? *from[u] : 0;
        for (int u = 0; u < 8; u++)
            if (from[u]) at[p + u] = v[u];
    }
}

// The deferred bytes k = t, t + stride, ...: each chased to a literal or a byte before the step, so
// they need none of the step's other bytes written.
ZD void zs_put_deferred(const zstep* s, int t, int stride, const u8* lit, u8* at) {
    int n = s->ndefer < ZS_DEFER ? s->ndefer : ZS_DEFER;
    for (int k = t; k < n; k += stride) {
        int p = s->defer[k] & 0x1FFFF, j = s->defer[k] >> 17;
        at[p] = *zs_src(s, j, p, lit, at);
    }
}

#ifdef __CUDACC__
#define ZS_FULL 0xffffffffu

// Exclusive sums over the thread block of two counts packed in one 64-bit value; `all` gets the totals.
__device__ u64 zs_scan(u64 v, u64* all, u64* warp_sums) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    u64 x = v;
    for (int d = 1; d < 32; d <<= 1) {
        u64 y = __shfl_up_sync(ZS_FULL, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sums[w] = x;
    __syncthreads();
    u64 before = 0, total = 0;
    for (int k = 0; k < ZS_STEP / 32; k++) {
        before += k < w ? warp_sums[k] : 0;
        total += warp_sums[k];
    }
    *all = total;
    return before + x - v;
}

__device__ void zs_copy_frame(i64 c, const i64* base, const i64* counts, const u8* const* src,
                              const zblock* blocks, const u8* lits, const u64* seqs, u8* const* dst, int* status) {
    __shared__ zstep s;
    __shared__ u64 sums[ZS_STEP / 32];
    __shared__ int bad;
    int t = threadIdx.x;
    u8* frame = dst[c];
    for (i64 b = base[3 * c]; b < base[3 * c] + counts[3 * c]; b++) {
        const zblock* r = blocks + b;
        const u8* in = src[c] + r->src;
        u8* out = frame + r->out;
        if (r->type != 2) {
            zs_put_run(frame, r->out, in, r->size, r->type == 1, t, ZS_STEP);
            __syncthreads();
            continue;
        }
        const u8* lit = lits + r->lit;
        int lpos = 0, opos = 0;
        u64 next = t < r->nseq ? seqs[r->seq + t] : 0;
        for (int g = 0; g < r->nseq; g += ZS_STEP) {
            bool have = g + t < r->nseq;
            u64 q = next;
            next = g + ZS_STEP + t < r->nseq ? seqs[r->seq + g + ZS_STEP + t] : 0;  // the next step's, early
            int ll = (int)(q & 0x3FFFF), ml = (int)((q >> 18) & 0x3FFFF);
            u32 off = have ? zs_resolve((u32)(q >> 36), r->hist_in) : 1;
            if (t == 0) bad = 0;
            u64 all, x = zs_scan((u64)ll | ((u64)(ll + ml) << 32), &all, sums);
            int a = (int)(x & 0xffffffffu), e = (int)(x >> 32);
            int lits_in = (int)(all & 0xffffffffu), len = (int)(all >> 32);
            if (t == 0) {
                s.n = r->nseq - g < ZS_STEP ? r->nseq - g : ZS_STEP;
                s.ostart[ZS_STEP] = len;
                s.ndefer = 0;
            }
            s.ostart[t] = have ? e : len;
            s.mstart[t] = e + ll;
            s.lstart[t] = lpos + a;
            s.off[t] = (int)off;
            if (have && zs_bad_match(r, opos + e + ll, off)) bad = 1;
            __syncthreads();
            if (bad) {
                if (t == 0) zs_fail(status + c, ZS_OFFSET);
                return;
            }
            u8* at = out + opos;
            int per = (len + ZS_STEP - 1) / ZS_STEP, p0 = t * per, p1 = p0 + per < len ? p0 + per : len;
            if (p0 < p1) zs_put(&s, zs_find(&s, s.n - 1, p0), p0, p1, lit, at);
            __syncthreads();  // the deferred list complete
            zs_put_deferred(&s, t, ZS_STEP, lit, at);
            __syncthreads();
            opos += len;
            lpos += lits_in;
        }
        zs_put_run(out, opos, lit + lpos, r->lit_size - lpos, 0, t, ZS_STEP);
        __syncthreads();
    }
}
#endif

// ---- copying small frames: a warp a frame, its sequences in order -------------------------------------------
// Over many small frames (tens of thousands of blosc inner streams of 32 KiB) the frame copier above is
// bound by its instructions: its lanes each take bytes of the step, found through the step's table one by
// one, every load and store a sector of its own. Here a warp takes a frame and copies one sequence at a
// time, its lanes on consecutive bytes: a byte of a match comes from a literal of its own sequence or
// from before the sequence (a match overlapping itself repeats its first period), so the lanes need
// no order within a sequence, only the warp's barrier between sequences.

// Sequence bytes x = lane, lane + lanes, ... of [0, ll + ml) at `out`: its ll literals from `lit`, then
// its match of ml bytes at offset `off` (checked to lie inside the frame).
ZD void zs_put_seq(u8* out, const u8* lit, int ll, int ml, int off, int lane, int lanes) {
    for (int x = lane; x < ll + ml; x += lanes) {
        int k = x - ll, q = ll - off + (k < off ? k : k % off);
        out[x] = x < ll ? lit[x] : (q >= 0 ? lit[q] : out[q]);
    }
}

#ifdef __CUDACC__

__device__ void zs_copy_warp_frame(i64 c, const i64* base, const i64* counts, const u8* const* src,
                                   const zblock* blocks, const u8* lits, const u64* seqs, u8* const* dst,
                                   int* status) {
    int lane = threadIdx.x & 31;
    u8* frame = dst[c];
    for (i64 b = base[3 * c]; b < base[3 * c] + counts[3 * c]; b++) {
        const zblock* r = blocks + b;
        const u8* in = src[c] + r->src;
        u8* out = frame + r->out;
        if (r->type != 2) {
            zs_put_run(frame, r->out, in, r->size, r->type == 1, lane, 32);
            __syncwarp();
            continue;
        }
        const u8* lit = lits + r->lit;
        int lpos = 0, opos = 0;
        for (int g = 0; g < r->nseq; g += 32) {  // 32 sequences read at once, a lane each
            bool have = g + lane < r->nseq;
            u64 q = have ? seqs[r->seq + g + lane] : 0;
            int ll = (int)(q & 0x3FFFF), ml = (int)((q >> 18) & 0x3FFFF);
            int off = have ? (int)zs_resolve((u32)(q >> 36), r->hist_in) : 1;
            int a = ll, e = ll + ml;  // inclusive sums over the lanes, then exclusive
            for (int d = 1; d < 32; d <<= 1) {
                int ya = __shfl_up_sync(ZS_FULL, a, d), ye = __shfl_up_sync(ZS_FULL, e, d);
                if (lane >= d) a += ya, e += ye;
            }
            int lits_in = __shfl_sync(ZS_FULL, a, 31), len = __shfl_sync(ZS_FULL, e, 31);
            a -= ll;
            e -= ll + ml;
            bool bad = have && zs_bad_match(r, opos + e + ll, (u32)off);
            if (__any_sync(ZS_FULL, bad)) {
                if (lane == 0) zs_fail(status + c, ZS_OFFSET);
                return;
            }
            int m = r->nseq - g < 32 ? r->nseq - g : 32;
            for (int k = 0; k < m; k++) {
                int kl = __shfl_sync(ZS_FULL, ll, k), km = __shfl_sync(ZS_FULL, ml, k);
                int ko = __shfl_sync(ZS_FULL, off, k), ke = __shfl_sync(ZS_FULL, e, k);
                int ka = __shfl_sync(ZS_FULL, a, k);
                zs_put_seq(out + opos + ke, lit + lpos + ka, kl, km, ko, lane, 32);
                __syncwarp();  // the sequence's bytes seen by the next one's lanes
            }
            opos += len;
            lpos += lits_in;
        }
        zs_put_run(out, opos, lit + lpos, r->lit_size - lpos, 0, lane, 32);
        __syncwarp();
    }
}
#endif

// ---- content checksums: XXH64 of each checked frame's output, four threads a frame ---------------------

#define ZS_P1 11400714785074694791ull
#define ZS_P2 14029467366897019727ull
#define ZS_P3 1609587929392839161ull
#define ZS_P4 9650029242287828579ull
#define ZS_P5 2870177450012600261ull

ZD u64 zs_rotl(u64 x, int r) { return (x << r) | (x >> (64 - r)); }
ZD u64 zs_xround(u64 acc, u64 in) { return zs_rotl(acc + in * ZS_P2, 31) * ZS_P1; }

ZD u64 zs_rd64(const u8* p) {  // eight bytes at p
#ifdef __CUDA_ARCH__
    if (!((size_t)p & 7)) return *(const u64*)p;
#endif
    return zs_le(p, 8);
}

// Accumulator k of XXH64 (seed 0) over the whole 32-byte stripes of [d, d + n): lane k reads the
// k-th eight bytes of each stripe, so the four lanes run side by side.
ZD u64 zs_xxh_lane(const u8* d, i64 n, int k) {
    u64 v = k == 0 ? ZS_P1 + ZS_P2 : (k == 1 ? ZS_P2 : (k == 2 ? 0 : 0 - ZS_P1));
    for (i64 s = 0; s < n / 32; s++) v = zs_xround(v, zs_rd64(d + 32 * s + 8 * k));
    return v;
}

// The low 32 bits of XXH64 of [d, d + n) from its four accumulators (the frame checksum's bits).
ZD u32 zs_xxh_finish(const u8* d, i64 n, const u64* v) {
    u64 h;
    if (n >= 32) {
        h = zs_rotl(v[0], 1) + zs_rotl(v[1], 7) + zs_rotl(v[2], 12) + zs_rotl(v[3], 18);
        for (int k = 0; k < 4; k++) h = (h ^ zs_xround(0, v[k])) * ZS_P1 + ZS_P4;
    } else {
        h = ZS_P5;
    }
    h += (u64)n;
    const u8* p = d + n / 32 * 32;
    i64 left = n % 32;
    for (; left >= 8; left -= 8, p += 8) h = zs_rotl(h ^ zs_xround(0, zs_rd64(p)), 27) * ZS_P1 + ZS_P4;
    if (left >= 4) {
        h = zs_rotl(h ^ zs_le(p, 4) * ZS_P1, 23) * ZS_P2 + ZS_P3;
        p += 4;
        left -= 4;
    }
    for (; left > 0; left--, p++) h = zs_rotl(h ^ *p * ZS_P5, 11) * ZS_P1;
    h ^= h >> 33;
    h *= ZS_P2;
    h ^= h >> 29;
    h *= ZS_P3;
    h ^= h >> 32;
    return (u32)h;
}

// block record i is the last of a frame with a content checksum, of a chunk decoded so far
ZD int zs_checked(const zblock* r, const int* status) {
    return (r->fflags & (ZS_LAST | ZS_CHECKED)) == (ZS_LAST | ZS_CHECKED) && !status[r->chunk];
}

// ---- the host's copier: the same steps, one after another ------------------------------------------------

#ifndef __CUDACC__
// Chunk c by the frame copier (ZS_BY_FRAME: its steps, each one's threads played in turn) or by the warp
// copier (ZS_BY_WARP: its sequences in order, each one's lanes played from the last).
static void zs_copy_host(i64 c, int copier, const i64* base, const i64* counts, const u8* const* src,
                         const zblock* blocks, const u8* lits, const u64* seqs, u8* const* dst, int* status) {
    static zstep s;
    if (status[c]) return;
    for (i64 b = base[3 * c]; b < base[3 * c] + counts[3 * c]; b++) {
        const zblock* r = blocks + b;
        const u8* in = src[c] + r->src;
        u8* out = dst[c] + r->out;
        if (r->type != 2) {
            for (int k = 0; k < r->size; k++) out[k] = r->type == 0 ? in[k] : in[0];
            continue;
        }
        const u8* lit = lits + r->lit;
        int lpos = 0, opos = 0;
        for (int k = 0; copier == ZS_BY_WARP && k < r->nseq; k++) {
            u64 q = seqs[r->seq + k];
            int ll = (int)(q & 0x3FFFF), ml = (int)((q >> 18) & 0x3FFFF);
            u32 off = zs_resolve((u32)(q >> 36), r->hist_in);
            if (zs_bad_match(r, opos + ll, off)) {
                zs_fail(status + c, ZS_OFFSET);
                return;
            }
            for (int lane = 31; lane >= 0; lane--) zs_put_seq(out + opos, lit + lpos, ll, ml, (int)off, lane, 32);
            opos += ll + ml;
            lpos += ll;
        }
        for (int g = 0; copier == ZS_BY_FRAME && g < r->nseq; g += ZS_STEP) {
            s.n = r->nseq - g < ZS_STEP ? r->nseq - g : ZS_STEP;
            int a = 0, e = 0;
            for (int t = 0; t < s.n; t++) {
                u64 q = seqs[r->seq + g + t];
                int ll = (int)(q & 0x3FFFF), ml = (int)((q >> 18) & 0x3FFFF);
                u32 off = zs_resolve((u32)(q >> 36), r->hist_in);
                if (zs_bad_match(r, opos + e + ll, off)) {
                    zs_fail(status + c, ZS_OFFSET);
                    return;
                }
                s.ostart[t] = e;
                s.mstart[t] = e + ll;
                s.lstart[t] = lpos + a;
                s.off[t] = (int)off;
                a += ll;
                e += ll + ml;
            }
            s.ostart[s.n] = e;
            s.ndefer = 0;
            int per = (e + ZS_STEP - 1) / ZS_STEP;  // the GPU's threads, played in turn
            for (int t = ZS_STEP - 1; t >= 0; t--)  // any order: no byte of a step reads another
                if (t * per < e) zs_put(&s, zs_find(&s, s.n - 1, t * per), t * per, t * per + per < e ? t * per + per : e, lit, out + opos);
            for (int t = 0; t < ZS_STEP; t++) zs_put_deferred(&s, t, ZS_STEP, lit, out + opos);
            opos += e;
            lpos += a;
        }
        for (int k = 0; k < r->lit_size - lpos; k++) out[opos + k] = lit[lpos + k];
    }
}
#endif

// ---- the copier by waves: for frames whose bytes are mostly literals ---------------------------------
// The frame copier above walks a frame in order, a thread block a frame, which leaves most of the GPU idle
// when a batch is a few large frames. Here every zstd block is resolved at once (a thread block a block):
// its literals and raw or RLE bytes written where they go and marked ready in a bitmap of the chunk's
// output, each sequence's record rewritten as its match (position in the block, length, concrete
// offset). Then waves: in each, every match not done whose source bytes outside itself are all ready is
// copied (a thread a match; one overlapping itself repeats its first period, read from its sources)
// and its bytes marked. The earliest match not done of a frame always has its sources ready, so
// every wave completes one at least and the waves end; on data whose matches are few and short (a
// noisy float volume), nearly all the match bytes are done within a few dozen waves.

// A resolved record: position (18 bits), length (18), offset (27). A block's records not yet copied are
// kept first, in order, and `remaining` counts them: each wave drops those it copies, so that later
// waves read only what is left (on such data, few records are left after the first waves).

ZD void zs_mark(u32* bits, i64 lo, i64 hi) {  // bits [lo, hi) set
    while (lo < hi) {
        int b = (int)(lo & 31), k = hi - lo < 32 - b ? (int)(hi - lo) : 32 - b;
        u32 m = k == 32 ? 0xffffffffu : ((1u << k) - 1) << b;
#ifdef __CUDA_ARCH__
        atomicOr(bits + (lo >> 5), m);
#else
        bits[lo >> 5] |= m;
#endif
        lo += k;
    }
}

ZD int zs_ready(const u32* bits, i64 lo, i64 hi) {  // bits [lo, hi) all set
    while (lo < hi) {
        int b = (int)(lo & 31), k = hi - lo < 32 - b ? (int)(hi - lo) : 32 - b;
        u32 m = k == 32 ? 0xffffffffu : ((1u << k) - 1) << b;
        if ((((const volatile u32*)bits)[lo >> 5] & m) != m) return 0;
        lo += k;
    }
    return 1;
}

// Match q of block r (a resolved record): copied if its sources are ready; 1 when copied.
ZD int zs_match(const zblock* r, u64 q, u8* chunk, u32* bits) {
    i64 at = r->out + (i64)(q & 0x3FFFF), ml = (i64)((q >> 18) & 0x3FFFF), off = (i64)((q >> 36) & 0x7FFFFFF);
    i64 from = at - off;
    if (!zs_ready(bits, from, from + ml < at ? from + ml : at)) return 0;
    // a match overlapping itself (off < ml) repeats its first period: each byte read from the
    // sources, never from the bytes this copy writes, so the loads need not wait for its stores
#ifdef __CUDA_ARCH__
    __threadfence();  // the bits seen before the bytes they mark
    for (i64 x = 0; x < ml; x++) chunk[at + x] = __ldcg(chunk + from + (x < off ? x : x % off));  // L2
    __threadfence();  // the bytes before their bits
#else
    for (i64 x = 0; x < ml; x++) chunk[at + x] = chunk[from + (x < off ? x : x % off)];
#endif
    zs_mark(bits, at, at + ml);
    return 1;
}

// The matches left of chunk c, in order: each one's sources are done (earlier matches, literals).
ZD void zs_finish_chunk(i64 c, const i64* base, const i64* counts, const zblock* blocks, const u64* seqs,
                        const int* remaining, u8* chunk, u32* bits, int* status) {
    for (i64 b = base[3 * c]; b < base[3 * c] + counts[3 * c] && !status[c]; b++) {
        const zblock* r = blocks + b;
        for (int k = 0; r->type == 2 && k < remaining[b]; k++) {
            if (!zs_match(r, seqs[r->seq + k], chunk, bits)) {
                zs_fail(status + c, ZS_CORRUPT);  // cannot happen: a match's sources lie before it
                return;
            }
        }
    }
}

// Bytes of a block that need no match (a raw or RLE block, a literal run), thread t's share of them;
// the caller marks them once every share is written.
#ifndef __CUDACC__
// The host's resolve of block b: the GPU's step, one sequence after another.
static void zs_resolve_host(i64 b, const u8* const* src, const zblock* blocks, const u8* lits, u64* seqs,
                            u8* const* dst, u32* const* bits, int* status) {
    const zblock* r = blocks + b;
    if (status[r->chunk]) return;
    u8* chunk = dst[r->chunk];
    u32* map = bits[r->chunk];
    if (r->type != 2) {
        zs_put_run(chunk, r->out, src[r->chunk] + r->src, r->size, r->type == 1, 0, 1);
        zs_mark(map, r->out, r->out + r->size);
        return;
    }
    const u8* lit = lits + r->lit;
    i64 opos = 0, lpos = 0;
    for (int k = 0; k < r->nseq; k++) {
        u64 q = seqs[r->seq + k];
        i64 ll = (i64)(q & 0x3FFFF), ml = (i64)((q >> 18) & 0x3FFFF);
        u32 off = zs_resolve((u32)(q >> 36), r->hist_in);
        if (zs_bad_match(r, opos + ll, off)) {
            zs_fail(status + r->chunk, ZS_OFFSET);
            return;
        }
        zs_put_run(chunk, r->out + opos, lit + lpos, ll, 0, 0, 1);
        zs_mark(map, r->out + opos, r->out + opos + ll);
        seqs[r->seq + k] = (u64)(opos + ll) | ((u64)ml << 18) | ((u64)off << 36);
        opos += ll + ml;
        lpos += ll;
    }
    zs_put_run(chunk, r->out + opos, lit + lpos, r->lit_size - lpos, 0, 0, 1);
    zs_mark(map, r->out + opos, r->out + r->dsize);
}
#endif

#ifdef __CUDACC__
#define ZS_ITEM i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; if (i >= n) return
#define ZS_SRC (const u8* const*)src

extern "C" {
__global__ void zs_count(i64 n, const u64* src, const i64* sizes, const i64* expected, i64* counts,
                         int* status) {
    ZS_ITEM;
    status[i] = zs_walk((const u8*)src[i], sizes[i], expected[i], (int)i, counts + 3 * i, 0, 0);
    if (status[i]) counts[3 * i] = counts[3 * i + 1] = counts[3 * i + 2] = 0;
}

__global__ void zs_fill(i64 n, const u64* src, const i64* sizes, const i64* expected, i64* counts,
                        const i64* base, zblock* blocks, int* status) {
    ZS_ITEM;
    if (!status[i]) zs_walk((const u8*)src[i], sizes[i], expected[i], (int)i, counts + 3 * i, blocks, base + 3 * i);
}

__global__ void zs_tables(i64 n, const u64* src, zblock* blocks, u16* huf, u16* fse, int* status) {
    ZS_ITEM;
    zs_tables_item(i, ZS_SRC, blocks, huf, fse, status);
}

// Four threads a zstd block (its literal streams), ZS_LIT_THREADS a thread block: each four first copy
// their block's Huffman table into shared memory (4 KiB at most), as the sequences' threads do their
// FSE tables: a batch's tables in global memory outgrow the L2 cache.
__global__ void __launch_bounds__(ZS_LIT_THREADS)
zs_literals(i64 n, const u64* src, const zblock* blocks, const u16* huf, u8* lits, int* status) {
    __shared__ u16 rooms[ZS_LIT_THREADS / 4][ZS_HUF_ENTRIES];
    __shared__ int entries[ZS_LIT_THREADS / 4];
    i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    int g = threadIdx.x >> 2, s = threadIdx.x & 3;
    if (s == 0) entries[g] = i < n ? zs_huf_entries(blocks, i / 4, status) : 0;  // one verdict for the four
    __syncthreads();
    int m = entries[g];
    const u16* t = i < n && m ? huf + (i64)blocks[i / 4].huf * ZS_HUF_ENTRIES : 0;
    for (int e = s; e < m; e += 4) rooms[g][e] = t[e];
    __syncthreads();
    if (i < n) zs_literals_item(i, ZS_SRC, blocks, huf, lits, status, m ? rooms[g] : 0);
}

// ZS_SEQ_THREADS threads a thread block: their rooms (20 KiB) leave room for ten per SM (80 threads), spread
// over the schedulers
__global__ void zs_sequences(i64 n, const u64* src, zblock* blocks, const u16* fse, u64* seqs, int* status) {
    __shared__ zlengths lengths;
    __shared__ u16 rooms[ZS_SEQ_THREADS][ZS_SEQ_ROOM];
    if (threadIdx.x == 0) lengths = ZS_LENGTHS;
    __syncthreads();
    ZS_ITEM;
    zs_sequences_item(i, ZS_SRC, blocks, fse, &lengths, seqs, status, rooms[threadIdx.x]);
}

__global__ void zs_place(i64 n, const i64* base, const i64* counts, zblock* blocks, const i64* expected,
                         int* status) {
    ZS_ITEM;
    zs_place_item(i, base, counts, blocks, expected, status);
}

__global__ void zs_checksum(i64 n, const zblock* blocks, const u64* dst, int* status) {
    __shared__ u64 v[ZS_XXH_THREADS];
    i64 i = (blockIdx.x * (i64)blockDim.x + threadIdx.x) >> 2;
    int k = threadIdx.x & 3;
    const zblock* r = blocks + i;
    int mine = i < n && zs_checked(r, status);
    const u8* f = mine ? (const u8*)dst[r->chunk] + r->fout : 0;
    i64 len = mine ? r->out + r->dsize - r->fout : 0;
    v[threadIdx.x] = mine ? zs_xxh_lane(f, len, k) : 0;
    __syncthreads();
    if (mine && k == 0 && zs_xxh_finish(f, len, v + threadIdx.x) != r->xxh) zs_fail(status + r->chunk, ZS_CHECKSUM);
}

// A thread block a zstd block (ZS_STEP threads) of the chunks of ZS_BY_WAVES: the resolve of the copier by
// waves. `remaining[b]` gets the block's matches and `left` their sum, which the waves count down. Its
// marks are read by later kernels only, whose launch orders these writes before them.
__global__ void zs_resolve_blocks(i64 n, const u64* src, const zblock* blocks, const u8* lits, u64* seqs,
                                  const u64* dst, const u64* bits, int* remaining, unsigned long long* left,
                                  const u8* copier, int* status) {
    __shared__ u64 sums[ZS_STEP / 32];
    __shared__ int bad, skip;
    int t = threadIdx.x;
    const zblock* r = blocks + blockIdx.x;
    if (t == 0) {
        remaining[blockIdx.x] = 0;
        // read once: other blocks of the chunk may fail it
        skip = blockIdx.x >= n || copier[r->chunk] != ZS_BY_WAVES || status[r->chunk];
    }
    __syncthreads();
    if (skip) return;
    u8* chunk = (u8*)dst[r->chunk];
    u32* map = (u32*)bits[r->chunk];
    if (r->type != 2) {
        zs_put_run(chunk, r->out, (const u8*)src[r->chunk] + r->src, r->size, r->type == 1, t, ZS_STEP);
        __syncthreads();
        if (t == 0) zs_mark(map, r->out, r->out + r->size);
        return;
    }
    const u8* lit = lits + r->lit;
    int lpos = 0, opos = 0;
    for (int g = 0; g < r->nseq; g += ZS_STEP) {
        bool have = g + t < r->nseq;
        u64 q = have ? seqs[r->seq + g + t] : 0;
        int ll = (int)(q & 0x3FFFF), ml = (int)((q >> 18) & 0x3FFFF);
        u32 off = have ? zs_resolve((u32)(q >> 36), r->hist_in) : 1;
        if (t == 0) bad = 0;
        u64 all, x = zs_scan((u64)ll | ((u64)(ll + ml) << 32), &all, sums);
        int a = (int)(x & 0xffffffffu), e = (int)(x >> 32);
        if (have && zs_bad_match(r, opos + e + ll, off)) bad = 1;
        __syncthreads();
        if (bad) {
            if (t == 0) zs_fail(status + r->chunk, ZS_OFFSET);
            return;
        }
        if (have) {
            i64 at = r->out + opos + e;
            zs_put_run(chunk, at, lit + lpos + a, ll, 0, 0, 1);
            zs_mark(map, at, at + ll);
            seqs[r->seq + g + t] = (u64)(opos + e + ll) | ((u64)ml << 18) | ((u64)off << 36);
        }
        opos += (int)(all >> 32);
        lpos += (int)(all & 0xffffffffu);
        __syncthreads();  // the warp sums read before the next step's scan writes them
    }
    zs_put_run(chunk, r->out + opos, lit + lpos, r->lit_size - lpos, 0, t, ZS_STEP);
    __syncthreads();
    if (t == 0) {
        zs_mark(map, r->out + opos, r->out + r->dsize);
        remaining[blockIdx.x] = r->nseq;
        atomicAdd(left, (unsigned long long)r->nseq);
    }
}

// One wave: a thread block a zstd block, its threads over its matches left, pass after pass while a
// pass copies some (at most ZS_WAVE_PASSES): a match waiting on an earlier one of its block, or of a
// block that ran before it in the wave, is copied in this wave, not the next. Each pass keeps the
// matches it could not copy first, in order: a round's records are all read before the block's scan,
// and each is written back no later than where it was read.
#ifndef ZS_WAVE_PASSES
#define ZS_WAVE_PASSES 8
#endif
__global__ void zs_wave(i64 n, const zblock* blocks, u64* seqs, const u64* dst, const u64* bits, int* remaining,
                        unsigned long long* left, const int* status) {
    __shared__ u64 sums[ZS_STEP / 32];
    __shared__ int todo;
    const zblock* r = blocks + blockIdx.x;
    if (threadIdx.x == 0) {
        bool go = blockIdx.x < n && r->type == 2 && !status[r->chunk];  // waves' only (`remaining` > 0)
        todo = go ? remaining[blockIdx.x] : 0;
    }
    __syncthreads();
    const int first = todo;
    if (first <= 0) return;
    u8* chunk = (u8*)dst[r->chunk];
    u32* map = (u32*)bits[r->chunk];
    u64* list = seqs + r->seq;
    int left_now = first;
    for (int pass = 0; pass < ZS_WAVE_PASSES; pass++) {
        int kept = 0;
        for (int g = 0; g < left_now; g += ZS_STEP) {
            int k = g + threadIdx.x;
            u64 q = k < left_now ? list[k] : 0;
            int keep = k < left_now && !zs_match(r, q, chunk, map);
            u64 all, at = zs_scan((u64)keep, &all, sums);
            if (keep) list[kept + (int)at] = q;
            kept += (int)all;
            __syncthreads();  // the warp sums read before the next round's scan writes them
        }
        bool stuck = kept == left_now;  // the same for every thread
        left_now = kept;
        if (stuck || !kept) break;
    }
    if (threadIdx.x == 0 && left_now != first) {
        remaining[blockIdx.x] = left_now;
        atomicAdd(left, (unsigned long long)(-(long long)(first - left_now)));
    }
}

// The copiers of the chunks, one a chunk in `copier`: ZS_BY_FRAME, ZS_BY_WAVES or ZS_BY_WARP.
// A thread block a chunk of ZS_BY_FRAME. At the short step its registers are capped so that an SM holds
// six thread blocks, not four (40 registers a thread, none spilled; uncapped (four), five, and eight,
// which spills, all copy a large batch slower: docs/performance.md); the long step's 56 registers
// already allow its 1024 threads.
#if ZS_STEP <= 256
#define ZS_COPY_BOUND __launch_bounds__(ZS_STEP, 6)
#else
#define ZS_COPY_BOUND
#endif
__global__ void ZS_COPY_BOUND zs_copy(i64 n, const i64* base, const i64* counts, const u64* src, const zblock* blocks,
                        const u8* lits, const u64* seqs, const u64* dst, const u8* copier, int* status) {
    if (blockIdx.x < n && copier[blockIdx.x] == ZS_BY_FRAME && !status[blockIdx.x])
        zs_copy_frame(blockIdx.x, base, counts, ZS_SRC, blocks, lits, seqs, (u8* const*)dst, status);
}

// A warp a chunk of ZS_BY_WARP, ZS_WARPS a thread block.
__global__ void zs_copy_warps(i64 n, const i64* base, const i64* counts, const u64* src, const zblock* blocks,
                              const u8* lits, const u64* seqs, const u64* dst, const u8* copier, int* status) {
    i64 c = blockIdx.x * (i64)ZS_WARPS + (threadIdx.x >> 5);
    if (c < n && copier[c] == ZS_BY_WARP && !status[c])  // the same for the warp's lanes
        zs_copy_warp_frame(c, base, counts, ZS_SRC, blocks, lits, seqs, (u8* const*)dst, status);
}

// After ZS_WAVES_MAX waves, a thread a chunk of ZS_BY_WAVES finishes its matches left in order, where each
// one's sources are done (the waves end sooner on the data they are for; this bounds the worst case).
__global__ void zs_finish(i64 n, const i64* base, const i64* counts, const zblock* blocks, const u64* seqs,
                          const int* remaining, const u64* dst, const u64* bits, const u8* copier, int* status) {
    ZS_ITEM;
    if (copier[i] == ZS_BY_WAVES)
        zs_finish_chunk(i, base, counts, blocks, seqs, remaining, (u8*)dst[i], (u32*)bits[i], status);
}}
#else


// The whole decode of n frames on the host, in the GPU's order of steps (tests only): each chunk by the
// copier `copier` names (ZS_BY_FRAME, ZS_BY_WAVES or ZS_BY_WARP; all by frame where it is null).
int zs_host_decode(i64 n, const u8* const* src, const i64* sizes, u8* const* dst, const i64* expected,
                   int* status, int verify, const u8* copier);
#include <stdlib.h>
#include <string.h>
static void zs_copy_waves_host(i64 n, i64 tb, const i64* base, const i64* counts, const u8* const* src,
                               const zblock* blocks, const u8* lits, u64* seqs, u8* const* dst,
                               const i64* expected, const u8* copier, int* status) {
    u32** bits = (u32**)calloc(n + 1, sizeof(u32*));
    int* remaining = (int*)calloc(tb + 1, sizeof(int));
    for (i64 c = 0; c < n; c++) bits[c] = (u32*)calloc(expected[c] / 32 + 2, sizeof(u32));
    for (i64 b = 0; b < tb; b++) {
        if (copier[blocks[b].chunk] != ZS_BY_WAVES) continue;
        zs_resolve_host(b, src, blocks, lits, seqs, dst, bits, status);
        remaining[b] = blocks[b].type == 2 ? blocks[b].nseq : 0;
    }
    // each wave from the last match back, so that matches wait for their sources as on the GPU; the
    // matches a block could not copy are kept first, in order, as the GPU's waves keep them
    for (int w = 0, progress = 1; progress && w < ZS_WAVES_MAX; w++) {
        progress = 0;
        for (i64 b = tb - 1; b >= 0; b--) {
            const zblock* r = blocks + b;
            if (r->type != 2 || copier[r->chunk] != ZS_BY_WAVES || status[r->chunk]) continue;
            u64* list = seqs + r->seq;
            int copied = remaining[b];  // the matches kept are packed in order above it
            for (int k = remaining[b] - 1; k >= 0; k--)
                if (!zs_match(r, list[k], dst[r->chunk], bits[r->chunk])) list[--copied] = list[k];
            progress += copied;
            remaining[b] -= copied;
            memmove(list, list + copied, remaining[b] * sizeof(u64));
        }
    }
    for (i64 c = 0; c < n; c++)
        if (copier[c] == ZS_BY_WAVES)
            zs_finish_chunk(c, base, counts, blocks, seqs, remaining, dst[c], bits[c], status);
    for (i64 c = 0; c < n; c++) free(bits[c]);
    free(bits);
    free(remaining);
}

int zs_host_decode(i64 n, const u8* const* src, const i64* sizes, u8* const* dst, const i64* expected,
                   int* status, int verify, const u8* copier) {
    i64* counts = (i64*)calloc(3 * n + 1, sizeof(i64));
    i64* base = (i64*)calloc(3 * n + 1, sizeof(i64));
    i64 tb = 0, tl = 0, ts = 0;
    for (i64 c = 0; c < n; c++) {
        status[c] = zs_walk(src[c], sizes[c], expected[c], (int)c, counts + 3 * c, 0, 0);
        if (status[c]) counts[3 * c] = counts[3 * c + 1] = counts[3 * c + 2] = 0;
        base[3 * c] = tb;
        base[3 * c + 1] = tl;
        base[3 * c + 2] = ts;
        tb += counts[3 * c];
        tl += counts[3 * c + 1];
        ts += counts[3 * c + 2];
    }
    zblock* blocks = (zblock*)calloc(tb + 1, sizeof(zblock));
    u16* huf = (u16*)calloc((tb + 1) * ZS_HUF_ENTRIES, sizeof(u16));
    u16* fse = (u16*)calloc((tb + 1) * 3 * ZS_FSE_ENTRIES, sizeof(u16));
    u8* lits = (u8*)calloc(tl + 1, 1);
    u64* seqs = (u64*)calloc(ts + 1, sizeof(u64));
    for (i64 c = 0; c < n; c++) {
        if (!status[c]) zs_walk(src[c], sizes[c], expected[c], (int)c, counts + 3 * c, blocks, base + 3 * c);
    }
    for (i64 i = 0; i < tb; i++) zs_tables_item(i, src, blocks, huf, fse, status);
    u16 hroom[ZS_HUF_ENTRIES];
    for (i64 b = 0; b < tb; b++) {  // as on the device: the table copied first, where a block reads one
        int m = zs_huf_entries(blocks, b, status);
        for (int e = 0; e < m; e++) hroom[e] = huf[(i64)blocks[b].huf * ZS_HUF_ENTRIES + e];
        for (int k = 0; k < 4; k++) zs_literals_item(4 * b + k, src, blocks, huf, lits, status, m ? hroom : 0);
    }
    u16 room[ZS_SEQ_ROOM];
    for (i64 i = 0; i < tb; i++) zs_sequences_item(i, src, blocks, fse, &ZS_LENGTHS, seqs, status, room);
    for (i64 c = 0; c < n; c++) zs_place_item(c, base, counts, blocks, expected, status);
    u8* none = (u8*)calloc(n + 1, 1);  // ZS_BY_FRAME
    if (!copier) copier = none;
    zs_copy_waves_host(n, tb, base, counts, src, blocks, lits, seqs, dst, expected, copier, status);
    for (i64 c = 0; c < n; c++)
        if (copier[c] != ZS_BY_WAVES) zs_copy_host(c, copier[c], base, counts, src, blocks, lits, seqs, dst, status);
    free(none);
    for (i64 i = 0; verify && i < tb; i++) {
        const zblock* r = blocks + i;
        if (!zs_checked(r, status)) continue;
        const u8* f = dst[r->chunk] + r->fout;
        i64 len = r->out + r->dsize - r->fout;
        u64 v[4];
        for (int k = 0; k < 4; k++) v[k] = zs_xxh_lane(f, len, k);
        if (zs_xxh_finish(f, len, v) != r->xxh) zs_fail(status + r->chunk, ZS_CHECKSUM);
    }
    free(counts); free(base); free(blocks); free(huf); free(fse); free(lits); free(seqs);
    return 0;
}
#endif
