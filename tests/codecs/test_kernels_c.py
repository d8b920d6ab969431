"""The CUDA kernels' logic, compiled as C with the host compiler and checked against numcodecs.

This checks the structure-check, blosc, crc32c and copy kernels' work functions (``*_item`` and the
like) on the host, built from the package's own files in ``gpu/kernels/`` (``common.cuh`` gives C the
CUDA qualifiers they use, and leaves out their ``__global__`` wrappers); the gpu-marked tests run the
same code as CUDA on the GPU machine.
"""

import ctypes
import os
import re
import shutil
import subprocess
import zlib

import numpy as np
import pytest
from numcodecs import LZ4, Blosc, Zstd

from zarr_dask_gpu.codecs import headers
from zarr_dask_gpu.gpu import kernels

from ..helpers import lz4_fuzz

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


SOURCES = [kernels.CUDA / name for name in ("validate.cu", "blosc.cu", "crc32c.cu", "copy.cu")]


def build_kernels(out, *flags: str) -> None:
    """The kernels' device functions, compiled as C into one shared library ``out``."""
    cmd = ["cc", "-O1", *flags, "-shared", "-fPIC", "-x", "c", "-o", str(out), *map(str, SOURCES)]
    subprocess.run(cmd, check=True)


def _asan() -> str | None:
    """The path of the C compiler's AddressSanitizer runtime, None without one."""
    if shutil.which("cc") is None:
        return None
    found = subprocess.run(
        ["cc", "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    return found if os.path.isabs(found) else None


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = tmp_path_factory.mktemp("kernels") / "k.so"
    build_kernels(so)
    return ctypes.CDLL(str(so))


def _p(a: np.ndarray) -> ctypes.c_void_p:
    return a.ctypes.data_as(ctypes.c_void_p)


def _validate(lib, frames, kind, expected):
    buf = np.frombuffer(b"".join(frames) + b"\0", np.uint8).copy()
    offs = np.cumsum([0, *[len(f) for f in frames]])[:-1].astype(np.int64)
    sizes = np.array([len(f) for f in frames], np.int64)
    exp = np.full(len(frames), expected, np.int64)
    status, claimed = np.zeros(len(frames), np.int32), np.zeros(len(frames), np.int64)
    for i in range(len(frames)):
        lib.validate_item(
            ctypes.c_longlong(i),
            _p(buf),
            _p(offs),
            _p(sizes),
            ctypes.c_int(kind),
            _p(exp),
            _p(status),
            _p(claimed),
        )
    return status


@pytest.mark.parametrize(
    "name,codec,kind",
    [("zstd", Zstd(1), 1), ("lz4", LZ4(), 4)],
)
def test_structure_check_stops_every_listed_damage(lib, name, codec, kind):
    raw = np.round(np.random.default_rng(0).standard_normal(1 << 16), 2).astype("f4").tobytes()
    good = bytes(codec.encode(raw))
    damaged = {
        "half": good[: len(good) // 2],
        "empty": b"",
        "garbage": np.random.default_rng(1).integers(0, 256, len(good), dtype=np.uint8).tobytes(),
        "larger": bytes(codec.encode(raw * 2)),
    }
    status = _validate(lib, [good, *damaged.values()], kind, len(raw))
    assert status[0] == 0
    for what, st in zip(damaged, status[1:], strict=True):
        assert st != 0, what


def _warp_walk(lib, block: bytes, size: int, shift: int = 0) -> int:
    """The warp's walk of a bare lz4 block (its lanes played in turn, its window refilled by one
    thread), the block placed ``shift`` bytes past a 16-byte boundary: its status."""
    buf = np.zeros(len(block) + 64, np.uint8)
    buf[32 + shift : 32 + shift + len(block)] = np.frombuffer(block, np.uint8)
    win, claimed = np.zeros(2048, np.uint8), np.zeros(1, np.int64)
    return lib.lz4_item(
        ctypes.c_void_p(buf.ctypes.data + 32 + shift),
        ctypes.c_longlong(len(block)),
        ctypes.c_int(5),
        ctypes.c_longlong(size),
        _p(win),
        _p(claimed),
    )


def test_the_warps_lz4_walk_agrees_with_one_threads(lib):
    """The warp's walk gives the status of the sequence-by-sequence walk on every stream, sound or
    damaged."""
    statuses = set()
    for t, (frame, size) in enumerate(lz4_fuzz(2, 600)):
        got = _warp_walk(lib, frame, size, t % 16)  # the window's loads start 16-byte aligned, before it
        want = _validate(lib, [frame], 5, size)[0]
        assert got == want, t
        statuses.add(int(want))
    assert statuses == {0, 1, 3}


# lz4 blocks (bare, as blosc stores them) that break liblz4's end-of-block rules, which
# LZ4_decompress_safe refuses and nvCOMP must not be given: a match starts 12 bytes or more before the
# block's end and ends 5 or more before it. Each with its decoded size.
LZ4_END_RULES_BROKEN = {
    "a match to the end, then an empty last token": ("886162636465666768080000", 20),
    "a match starting 8 bytes before the end": ("806162636465666768080040696a6b6c", 16),
    "a match ending 4 bytes before the end": ("846162636465666768080040696a6b6c", 20),
    "a match starting 11 bytes before the end": ("906162636465666768690800706a6b6c6d6e6f70", 20),
    "a second match starting 9 bytes before the end": ("806162636465666768080000040050696a6b6c6d", 21),
}
LZ4_END_RULES_KEPT = {  # the bounds themselves
    "a match starting 12 bytes before the end": ("806162636465666768080080696a6b6c6d6e6f70", 20),
    "a match ending 5 bytes before the end": ("836162636465666768080050696a6b6c6d", 20),
}


def test_lz4_walks_keep_liblz4s_end_of_block_rules(lib):
    """Both walks refuse the blocks that end in a match or too close after one, as liblz4 does, and
    take those at the bounds, as liblz4 does."""
    for table, want in ((LZ4_END_RULES_BROKEN, False), (LZ4_END_RULES_KEPT, True)):
        for name, (hexed, size) in table.items():
            block = bytes.fromhex(hexed)
            try:
                ok = LZ4().decode(size.to_bytes(4, "little") + block) is not None
            except RuntimeError:
                ok = False
            assert ok == want, name  # liblz4's verdict, as numcodecs calls it
            warp = _warp_walk(lib, block, size)
            one = _validate(lib, [block], 5, size)[0]
            assert (warp == 0) == (one == 0) == want, (name, warp, one)


def _blosc_decode_on_host(lib, frame: bytes) -> bytes:
    """The GPU pipeline's steps, with the kernels' C code and CPU decoders for the streams."""
    buf = np.frombuffer(frame + b"\0" * 16, np.uint8).copy()
    h = headers.blosc_layout(buf[None, :16])
    rows = int(h["rows"][0])
    src, csize, dst, dsize = (np.full(rows, -1, np.int64) for _ in range(4))  # every row must be written
    zero = np.zeros(1, np.int64)
    sizes = np.array([len(frame)], np.int64)
    walked = 1 if h["flags"][0] & 2 else int(h["nblocks"][0])  # as gpu/decoders/blosc.py launches them
    for j in reversed(range(walked)):  # a thread a block, in any order
        st = lib.streams_item(
            ctypes.c_longlong(0),
            ctypes.c_longlong(j),
            _p(buf),
            _p(zero),
            _p(sizes),
            _p(zero),
            _p(zero),
            _p(src),
            _p(csize),
            _p(dst),
            _p(dsize),
        )
        assert st == 0
    assert (csize >= 0).all() and (dsize >= 0).all(), "a row of the table left unwritten"
    nbytes, fmt = int(h["nbytes"][0]), (frame[2] >> 5)
    target = np.zeros(nbytes + 1, np.uint8)
    for s, c, d, n in zip(src, csize, dst, dsize, strict=True):
        data = frame[s : s + c]
        if c == n:
            target[d : d + n] = np.frombuffer(data, np.uint8)
        elif fmt == 1:
            target[d : d + n] = np.frombuffer(LZ4().decode(int(n).to_bytes(4, "little") + data), np.uint8)
        elif fmt == 4:
            target[d : d + n] = np.frombuffer(Zstd().decode(data), np.uint8)
        else:
            target[d : d + n] = np.frombuffer(zlib.decompress(data), np.uint8)
    flags, ts, bs = int(h["flags"][0]), int(h["typesize"][0]), int(h["blocksize"][0])
    out = target.copy()
    if not flags & 2 and ((flags & 1 and ts > 1) or flags & 4):
        mode = 1 if flags & 1 and ts > 1 else 2
        for j in range(int(h["nblocks"][0])):
            _unshuffle(lib, target, out, j * bs, min(bs, nbytes - j * bs), ts, mode)
    return out[:nbytes].tobytes()


def _unshuffle(lib, src, out, at: int, m: int, ts: int, mode: int, threads: int = 1) -> None:
    """``unshuffle_item`` of the block of ``m`` bytes at ``at`` of ``src`` into ``out``, by each of
    ``threads`` threads in turn."""
    for t in range(threads):
        lib.unshuffle_item(
            ctypes.c_longlong(0),
            ctypes.c_longlong(t),
            ctypes.c_longlong(threads),
            _p(src),
            _p(out),
            _p(np.array([at], np.int64)),
            _p(np.array([m], np.int64)),
            _p(np.array([ts], np.int64)),
            _p(np.array([mode], np.int64)),
        )


@pytest.mark.parametrize("cname", ["lz4", "lz4hc", "zstd", "zlib"])
@pytest.mark.parametrize("shuffle", [Blosc.NOSHUFFLE, Blosc.SHUFFLE, Blosc.BITSHUFFLE])
@pytest.mark.parametrize("dtype", ["u1", "i2", "f4", "f8", "c16"])
def test_blosc_kernels_match_numcodecs(lib, cname, shuffle, dtype):
    rng = np.random.default_rng(3)
    for n in (0, 7, 1000, 70001):
        data = np.round(rng.standard_normal(n) * 10).astype(dtype).tobytes()
        for clevel in (0, 5):
            frame = bytes(
                Blosc(cname=cname, clevel=clevel, shuffle=shuffle).encode(np.frombuffer(data, dtype))
            )
            assert headers.check_blosc(frame[:16], len(frame), len(data)) is None
            assert _blosc_decode_on_host(lib, frame) == data, (n, clevel)


def _unshuffled(block: np.ndarray, ts: int, mode: int) -> np.ndarray:
    """c-blosc 1.x's unshuffle of one decoded block (format version 2), in numpy: its whole elements
    unshuffled (bit shuffle only for a multiple of 8 of them, else the block as is), the bytes after
    them as they are."""
    n = len(block) // ts
    out = block.copy()
    if mode == 1:
        out[: n * ts] = block[: n * ts].reshape(ts, n).T.ravel()
    elif mode == 2 and n % 8 == 0:
        bits = np.unpackbits(block[: n * ts], bitorder="little").reshape(ts, 8, n)  # plane 8j + q
        out[: n * ts] = np.packbits(bits.transpose(2, 0, 1), axis=-1, bitorder="little").ravel()
    return out


def test_unshuffle_item_agrees_with_numpy_for_any_split_of_threads(lib):
    """Blocks of every mode with odd sizes and type sizes (bytes past the last whole element, element
    counts off a multiple of 8), at an offset in a larger buffer, each unshuffled by 1, 3 and 256
    threads in turn (the block filled first with 0 or 255): every byte of the block written, as
    numpy's reference has it, and none outside it."""
    rng = np.random.default_rng(11)
    for _ in range(300):
        ts = int(rng.choice([1, 2, 3, 4, 8, 16, 33]))
        m, mode, at = int(rng.integers(0, 3000)), int(rng.integers(0, 3)), int(rng.integers(0, 9))
        src = rng.integers(0, 256, at + m + 9, dtype=np.uint8)
        want = src.copy()
        want[at : at + m] = _unshuffled(src[at : at + m], ts, mode)
        for threads, fill in ((1, 0), (3, 255), (256, 0)):
            out = src.copy()
            out[at : at + m] = fill
            _unshuffle(lib, src, out, at, m, ts, mode, threads)
            assert (out == want).all(), (ts, m, mode, threads)


def test_bit_unshuffle_of_numeric_blocks_agrees_with_numpy(lib):
    """Bit-shuffled blocks of a multiple of 8 whole elements of 1, 2, 4 and 8 bytes (the blocks of
    numeric arrays, which the random blocks above seldom are), some with bytes after them, at offsets
    aligned to the words the bit unshuffle stores and not, unshuffled by 1, 5 and 256 threads."""
    rng = np.random.default_rng(12)
    src, out = np.zeros(1 << 14, np.uint8), np.zeros(1 << 14, np.uint8)
    for _ in range(200):
        ts = int(rng.choice([1, 2, 4, 8]))
        m = ts * 8 * int(rng.integers(0, 120)) + int(rng.choice([0, 0, 1, ts + 3]))
        for at in (0, 16, 8, 3):  # 16-byte aligned, 8 (only 1-byte elements go as words), unaligned
            src[:] = rng.integers(0, 256, src.size, dtype=np.uint8)
            want = src.copy()
            want[at : at + m] = _unshuffled(src[at : at + m], ts, 2)
            for threads in (1, 5, 256):
                out[:] = src
                out[at : at + m] = 0
                _unshuffle(lib, src, out, at, m, ts, 2, threads)
                assert (out == want).all(), (ts, m, at, threads)


@pytest.mark.parametrize("shuffle", [Blosc.SHUFFLE, Blosc.BITSHUFFLE])
def test_blosc_kernels_match_numcodecs_past_the_last_whole_element(lib, shuffle):
    """Frames c-blosc writes with a type size that does not divide the data (``Blosc(typesize=...)`` on
    bytes): the bytes after the last whole element of a block are stored as they are."""
    for typesize, n in ((2, 129), (4, 1002), (8, 4097), (3, 70001)):
        data = (np.arange(n) // 16 % 7).astype(np.uint8).tobytes()
        frame = bytes(Blosc("lz4", 5, shuffle, typesize=typesize).encode(data))
        assert not frame[2] & 2, "stored as is: no shuffle to undo"
        assert _blosc_decode_on_host(lib, frame) == data == bytes(Blosc().decode(frame)), (typesize, n)


def test_crc32c_segments_and_combine_match_google_crc32c(lib):
    import google_crc32c

    table = np.zeros(256, np.uint32)
    lib.crc_table(_p(table), ctypes.c_longlong(0), ctypes.c_longlong(1))
    lib.crc_segment.restype = ctypes.c_uint32
    lib.crc_combine.restype = ctypes.c_uint32
    rng = np.random.default_rng(5)
    for n in (0, 1, 3, 100, 4096, 100_003):
        data = rng.integers(0, 256, n, dtype=np.uint8)
        whole = lib.crc_segment(_p(data), ctypes.c_longlong(n), _p(table))
        assert whole == google_crc32c.value(data.tobytes())
        for cut in {0, n // 3, n}:
            a, b = data[:cut].copy(), data[cut:].copy()
            ca = lib.crc_segment(_p(a), ctypes.c_longlong(a.size), _p(table))
            cb = lib.crc_segment(_p(b), ctypes.c_longlong(b.size), _p(table))
            assert (
                lib.crc_combine(ctypes.c_uint32(ca), ctypes.c_uint32(cb), ctypes.c_longlong(b.size)) == whole
            )


def test_copy_ranges_item(lib):
    rng = np.random.default_rng(0)
    buf = rng.integers(0, 256, 1000, dtype=np.uint8)
    src, size = np.array([3, 500, 999, 10]), np.array([17, 300, 1, 0])
    dst = np.array([0, 32, 336, 352])
    out = np.zeros(400, np.uint8)
    for k in range(len(src)):
        for t in range(4):  # four "threads" of one block
            lib.copy_item(
                ctypes.c_longlong(k),
                ctypes.c_longlong(t),
                ctypes.c_longlong(4),
                _p(buf),
                _p(src),
                _p(dst),
                _p(size),
                _p(out),
            )
    want = np.zeros(400, np.uint8)
    for s_, d_, n in zip(src, dst, size, strict=True):
        want[d_ : d_ + n] = buf[s_ : s_ + n]
    np.testing.assert_array_equal(out, want)


def test_the_shared_constants_are_defined_by_the_launchers_alone():
    """Each constant of ``gpu/kernels/shared.py`` is used by its source and defined there by no
    ``#define``: the value the launcher reads is the one the kernels are compiled with."""
    from zarr_dask_gpu.gpu.kernels import shared

    for name, table in shared.TABLES.items():
        text = (kernels.CUDA / name).read_text()
        for key in table:
            assert re.search(rf"\b{key}\b", text), (name, key)
            assert not re.search(rf"^\s*#\s*define\s+{key}\b", text, re.M), (name, key)
