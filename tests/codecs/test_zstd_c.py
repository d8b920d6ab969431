"""The block-parallel zstd decoder (``gpu/kernels/zstd.cu``), compiled as C with the host compiler and run in
the GPU's order of steps, against numcodecs (libzstd) over levels, sizes and kinds of data; damaged
and unsupported frames get their status, never a crash (an AddressSanitizer build runs the fuzz).

Each copier runs here with its lanes or steps played one after another, the warp copier's lanes from
the last; the gpu-marked tests run the whole decoder on the device.
"""

import ctypes
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
from numcodecs import Zstd

from zarr_dask_gpu.gpu import kernels
from zarr_dask_gpu.gpu.kernels import shared
from zarr_dask_gpu.gpu.kernels.shared import ZSTD

COPIERS = {"frames": ZSTD["ZS_BY_FRAME"], "waves": ZSTD["ZS_BY_WAVES"], "warps": ZSTD["ZS_BY_WARP"]}

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

OK, TRUNC, HEADER, CORRUPT, SIZE, UNSUPPORTED, OFFSET, DICT, CHECKSUM, TRAILING = (
    ZSTD[f"ZS_{k}"]
    for k in [
        "OK",
        "TRUNC",
        "HEADER",
        "CORRUPT",
        "SIZE",
        "UNSUPPORTED",
        "OFFSET",
        "DICT",
        "CHECKSUM",
        "TRAILING",
    ]
)
SOURCE = kernels.CUDA / "zstd.cu"  # includes common.cuh beside it


def _build(out, *flags: str, overrides: dict[str, int] | None = None) -> None:
    """zstd.cu as C, with the constants it shares with its launcher (``overrides`` in their place)."""
    defines = shared.flags("zstd.cu", overrides)
    cmd = ["cc", "-O1", "-g", "-shared", "-fPIC", *flags, *defines, "-x", "c", "-o", str(out), str(SOURCE)]
    subprocess.run(cmd, check=True)


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = tmp_path_factory.mktemp("zstd") / "zs.so"
    _build(so)
    return ctypes.CDLL(str(so))


def decode(
    lib, frames: list[bytes], expected: list[int], verify: bool = True, copier: str | list[str] = "frames"
) -> tuple[np.ndarray, list[bytes]]:
    """Each chunk's status and output, decoded together in one batch (content checksums verified), by
    the copier ``copier`` names (one for all, or one a chunk: ``COPIERS``)."""
    n = len(frames)
    bufs = [np.frombuffer(f + b"\0", np.uint8).copy() for f in frames]
    outs = [np.full(max(e, 1), 0xAB, np.uint8) for e in expected]
    table = ctypes.c_void_p * n
    src, dst = table(*[b.ctypes.data for b in bufs]), table(*[o.ctypes.data for o in outs])
    sizes = np.array([len(f) for f in frames], np.int64)
    exp = np.array(expected, np.int64)
    status = np.full(n, -1, np.int32)
    flags = np.array([COPIERS[c] for c in (copier if isinstance(copier, list) else [copier] * n)], np.uint8)
    lib.zs_host_decode(
        ctypes.c_longlong(n),
        src,
        ctypes.c_void_p(sizes.ctypes.data),
        dst,
        ctypes.c_void_p(exp.ctypes.data),
        ctypes.c_void_p(status.ctypes.data),
        ctypes.c_int(verify),
        ctypes.c_void_p(flags.ctypes.data),
    )
    return status, [o[:e].tobytes() for o, e in zip(outs, expected, strict=True)]


def _sample(n: int, seed: int = 0) -> bytes:
    """The benchmark's data: a smooth wave plus noise rounded to 0.1, as float32."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0, 40 * np.pi, max(n // 4, 1), dtype=np.float32)
    x = np.round(np.sin(t) * 10 + rng.standard_normal(t.size, dtype=np.float32), 1)
    return x.astype("f4").tobytes()[:n]


def _bitshuffled(n: int, seed: int) -> bytes:
    """The benchmark's wave as float16, its bits regrouped by plane as blosc's bitshuffle does: runs
    and repeats that the frame copier meets inside its steps (dataset E's inner streams)."""
    x = np.frombuffer(_sample(4 * (n // 2 + 8), seed), "<f4").astype("<f2")
    planes = np.unpackbits(x.view(np.uint8).reshape(-1, 2), axis=1, bitorder="little")
    return np.packbits(planes[: len(planes) // 8 * 8].T, axis=1, bitorder="little").tobytes()[:n]


def _kinds(n: int, seed: int) -> dict[str, bytes]:
    rng = np.random.default_rng(seed)
    return {
        "sample": _sample(n, seed),
        "random": rng.integers(0, 256, n, dtype=np.uint8).tobytes(),
        "zeros": bytes(n),
        "few-values": rng.choice(np.array([0, 1, 7, 200], np.uint8), n).tobytes(),
        "ramp": np.arange(n // 4 + 1, dtype="<i4").tobytes()[:n],
        "text": (b"the quick brown fox jumps over the lazy dog %d; " * (n // 40 + 1))[:n],
        "runs": np.repeat(rng.integers(0, 256, n // 97 + 1, dtype=np.uint8), 97).tobytes()[:n],
        "mixed": (rng.integers(0, 256, n // 2, dtype=np.uint8).tobytes() + bytes(n))[:n],
        "bitshuffled": _bitshuffled(n, seed),
    }


def fuzzed(sizes: tuple[int, ...], per_frame: int, seed: int, levels: tuple[int, ...] = (3,)):
    """Sound frames of every kind and size with one to three random bytes changed, and their sizes."""
    rng = np.random.default_rng(seed)
    frames, out = [], []
    for n in sizes:
        for data in _kinds(n, n).values():
            level = levels[0] if len(levels) == 1 else int(rng.choice(levels))
            good = bytes(Zstd(level).encode(data))
            for _ in range(per_frame):
                f = bytearray(good)
                for _ in range(int(rng.integers(1, 4))):
                    f[int(rng.integers(0, len(f)))] = int(rng.integers(0, 256))
                frames.append(bytes(f))
                out.append(n)
    return frames, out


def table_fuzzed(count: int, seed: int) -> tuple[list[bytes], list[int]]:
    """Small sound frames (8 to 3,000 bytes of few symbols, text, small integers or a float wave, at
    levels 1 to 19) with one or two bytes changed among their first 48: the frame and block headers,
    the literals' header and Huffman tree, the sequences' header and FSE tables. And their sizes."""
    rng = np.random.default_rng(seed)
    text = np.frombuffer(b"the quick brown fox jumps over a lazy dog ", np.uint8)
    frames, sizes = [], []
    for _ in range(count):
        n, kind = int(rng.integers(8, 3000)), int(rng.integers(0, 4))
        if kind == 0:
            values = rng.integers(97, 103, n, dtype=np.uint8)
        elif kind == 1:
            values = rng.choice(text, n)
        elif kind == 2:
            values = rng.integers(0, 4, n, dtype=np.uint8) * 17
        else:
            wave = np.sin(np.arange(n // 4) * 0.1) * 100
            values = np.round(wave + rng.standard_normal(n // 4)).astype("f4")
        data = values.tobytes()
        f = bytearray(Zstd(int(rng.choice([1, 3, 9, 19]))).encode(data))
        for _ in range(int(rng.integers(1, 3))):
            p = int(rng.integers(0, min(len(f), 48)))
            f[p] = int(rng.integers(0, 256)) if rng.random() < 0.5 else f[p] ^ 1 << int(rng.integers(0, 8))
        frames.append(bytes(f))
        sizes.append(len(data))
    return frames, sizes


# Frames libzstd refuses (each with the size it would decode to), each one that a decoder laxer than it
# in one check takes, writing wrong bytes: the kernels refuse them all (and leave them to the host)
REFUSED_BY_LIBZSTD = {
    # Huffman weights 2, 2, 2 and the implied 2: a complete code without a weight of 1 (HUF_readStats
    # asks for two or more, an even count)
    "a Huffman tree without a weight of 1": (
        "28b52ffd0000cd000022430507e0ba00504a4a29bef660ac7bc5133dd1e14a8e1500",
        50,
    ),
    # libzstd reads the weights' FSE table at accuracy log 6 at most
    "the weights' table at accuracy log 7": ("28b52ffd00006500003200020612fc0363c119c000", 3),
    # its stream shorter than the two states' bits (FSE_decompress: overflow after the states)
    "the weights' stream short of its two states": ("28b52ffd00005500003280010411fe1e054500", 3),
    # a symbol of 12 at log 6: past libzstd's workspace for the weights' table
    "the weights' table describing a symbol of 12": ("28b52ffd00006500003200020601fafd00de473500", 3),
    # no literal, a Huffman stream of more than its end mark (libzstd: BIT_endOfDStream)
    "no literal in a Huffman stream with bits left": ("28b52ffd00001800006162633d000002c0008010ff00", 3),
    "no literal in a treeless stream with bits left": ("28b52ffd00003c000022c000801004002d0000034000ff00", 2),
    # four streams hold six literals or more (MIN_LITERALS_FOR_4_STREAMS)
    "four Huffman streams of 4 literals": ("28b52ffd000085000046000380100100010001000203020300", 4),
    "four Huffman streams of 3 literals": ("28b52ffd000085000036000380100100010001000203020100", 3),
    "four Huffman streams of no literal": (
        "28b52ffd000018000061626385000006000380100100010001000101010100",
        3,
    ),
    "four treeless streams of 4 literals": (
        "28b52ffd00003c000022c000801004007500004780020100010001000203020300",
        6,
    ),
}


def past_the_window() -> tuple[bytes, bytes]:
    """A frame whose matches reach 3,500 bytes back, its window descriptor changed to 1 KiB, and the
    data it was made from: libzstd, streaming it (no content size), keeps only the window and copies
    other bytes; a decoder that reaches past the window writes the data, not what libzstd reads."""
    import zstandard

    rng = np.random.default_rng(0)
    head = rng.integers(0, 256, 200, dtype=np.uint8).tobytes()
    data = head + rng.integers(0, 256, 3300, dtype=np.uint8).tobytes() + head
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=12, write_content_size=False)
    co = zstandard.ZstdCompressor(compression_params=params).compressobj()
    frame = b"".join(
        co.compress(data[i : i + 1000]) + co.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
        for i in range(0, len(data), 1000)
    )
    frame += co.flush()
    assert frame[4] & 0x20 == 0  # not single-segment: byte 5 is the window descriptor
    return frame[:5] + b"\x00" + frame[6:], data


def disagreements(frames: list[bytes], sizes: list[int], got: list[bytes | None]) -> tuple[int, int]:
    """How many frames a decoder decoded (``got`` not None), and how many of those libzstd does not
    decode to the same bytes of the frame's size: a decoder may refuse what libzstd reads (the
    pipeline then asks libzstd on the host), never accept what it refuses or differ from it."""
    both = differ = 0
    for f, n, g in zip(frames, sizes, got, strict=True):
        if g is None:
            continue
        both += 1
        try:
            want = bytes(Zstd().decode(f))
        except Exception:
            want = None
        differ += want is None or len(want) != n or g != want
    return both, differ


SIZES = [1, 5, 100, 1000, 4096, 65536, 131072, 131073, 400_000, 2 << 20]
LEVELS = [-7, 1, 3, 9, 19, 22]


EACH_COPIER = pytest.mark.parametrize("copier", list(COPIERS))


@EACH_COPIER
@pytest.mark.parametrize("level", LEVELS)
def test_decodes_what_libzstd_wrote(lib, level, copier):
    frames, want = [], []
    for n in SIZES:
        for data in _kinds(n, seed=n + level + 10).values():
            frames.append(bytes(Zstd(level).encode(data)))
            want.append(data)
    status, got = decode(lib, frames, [len(w) for w in want], copier=copier)
    assert (status == OK).all(), status
    for g, w in zip(got, want, strict=True):
        assert g == w


def test_the_copier_past_its_deferred_list(tmp_path):
    """With room for four deferred bytes a step, the copier chases the rest where it finds them: the
    same bytes."""
    so = tmp_path / "zs4.so"
    _build(so, overrides={"ZS_DEFER": 4})
    small = ctypes.CDLL(str(so))
    frames, want = [], []
    for data in [*_kinds(300_000, seed=5).values(), _sample(2 << 20, seed=6)]:
        frames.append(bytes(Zstd(3).encode(data)))
        want.append(data)
    status, got = decode(small, frames, [len(w) for w in want])
    assert (status == OK).all() and got == want


@pytest.mark.parametrize("step", [32, 1024])
def test_the_copiers_at_other_step_sizes(tmp_path, step):
    """Built with steps of 32 or 1,024 sequences (the thread block's size), the frame copier and the
    copier by waves give libzstd's bytes (the package builds 256 and 1,024: ``zstd_blocks.FRAME_STEPS``)."""
    so = tmp_path / f"zs{step}.so"
    _build(so, overrides={"ZS_STEP": step})
    built = ctypes.CDLL(str(so))
    frames, want = [], []
    for data in [*_kinds(300_000, seed=7).values(), _sample(8 << 20, seed=8)]:
        frames.append(bytes(Zstd(3).encode(data)))
        want.append(data)
    for copier in ("frames", "waves"):
        status, got = decode(built, frames, [len(w) for w in want], copier=copier)
        assert (status == OK).all() and got == want, copier


@EACH_COPIER
def test_a_benchmark_chunk_at_the_zarr_default(lib, copier):
    """An 8 MiB chunk of dataset A: 98% of its bytes from matches, chained through hundreds of waves."""
    data = _sample(8 << 20, seed=3)
    frame = bytes(Zstd(0).encode(data))
    status, (got,) = decode(lib, [frame], [len(data)], copier=copier)
    assert status[0] == OK and got == data


@EACH_COPIER
def test_a_noisy_volume_chunk(lib, copier):
    """Slices of a float32 volume with noise kept to 0.001 (dataset Ez's kind): most bytes literals,
    short matches reaching back across many zstd blocks."""
    rng = np.random.default_rng(4)
    wave = 10 * np.sin(np.linspace(0, 6 * np.pi, 1024, dtype=np.float32))[:, None] * np.ones(1024, np.float32)
    data = (
        np.round(wave[None] + rng.standard_normal((3, 1024, 1024), dtype=np.float32), 3)
        .astype("f4")
        .tobytes()
    )
    frame = bytes(Zstd(0).encode(data))
    status, (got,) = decode(lib, [frame], [len(data)], copier=copier)
    assert status[0] == OK and got == data


def test_the_copiers_side_by_side_and_past_the_waves_bound(lib, tmp_path):
    """Chunks of one batch by each copier, in turn; and with a bound of two waves, the matches left
    copied in order: libzstd's bytes every time."""
    frames, want = [], []
    for seed, data in enumerate([*_kinds(300_000, seed=8).values(), _sample(2 << 20, seed=9)]):
        frames.append(bytes(Zstd(3 if seed % 2 else 0).encode(data)))
        want.append(data)
    sizes = [len(w) for w in want]
    status, got = decode(lib, frames, sizes, copier=[list(COPIERS)[i % 3] for i in range(len(frames))])
    assert (status == OK).all() and got == want
    _build(tmp_path / "zs2.so", overrides={"ZS_WAVES_MAX": 2})
    bounded = ctypes.CDLL(str(tmp_path / "zs2.so"))
    status, got = decode(bounded, frames, sizes, copier="waves")
    assert (status == OK).all() and got == want


@EACH_COPIER
def test_frames_as_libzstd_reads_them(lib, copier):
    """Several frames in one chunk, skippable frames, content checksums (XXH64, verified) and frames
    without a content size decode; a checksum that does not match, a dictionary id, bytes after the
    last frame and a frame cut short are refused."""
    data = _sample(300_000)
    one = bytes(Zstd(3).encode(data[:150_000]))
    two = one + bytes(Zstd(3).encode(data[150_000:]))
    checksummed = bytes(Zstd(3, checksum=True).encode(data))
    skip = b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd"
    skippable = skip + bytes(Zstd(3).encode(data)) + skip
    flipped = bytearray(checksummed)
    flipped[-1] ^= 0x10
    dict_id = bytearray(bytes(Zstd(3).encode(data)))
    dict_id[4] |= 1  # a 1-byte dictionary id after the frame header descriptor
    dict_id[5:5] = b"\x07"
    frames = [two, checksummed, skippable, bytes(flipped), bytes(dict_id), two + b"junk", one + one[:-1]]
    status, got = decode(lib, frames, [300_000] * len(frames), copier=copier)
    assert list(status) == [OK, OK, OK, CHECKSUM, DICT, TRAILING, TRUNC]
    assert got[:3] == [data] * 3
    for f, st in zip(frames, status, strict=True):  # the reference's verdict
        try:
            ok = bytes(Zstd().decode(f)) == data
        except RuntimeError:
            ok = False
        assert ok == (st == OK)


def test_sizes_that_differ_from_the_metadata(lib):
    data = _sample(200_000)
    frame = bytes(Zstd(3).encode(data))
    status, _ = decode(lib, [frame, frame, frame], [200_000, 199_999, 200_001])
    assert list(status) == [OK, SIZE, SIZE]


@EACH_COPIER
def test_damaged_frames_get_a_status(lib, copier):
    data = _sample(600_000)
    frame = bytes(Zstd(3).encode(data))
    cuts = [frame[:k] for k in (0, 3, 4, 6, 10, 100, len(frame) // 2, len(frame) - 1)]
    garbage = np.random.default_rng(1).integers(0, 256, len(frame), dtype=np.uint8).tobytes()
    not_zstd = b"\x28\xb5\x2f\xfe" + frame[4:]
    status, _ = decode(lib, [*cuts, garbage, not_zstd], [len(data)] * (len(cuts) + 2), copier=copier)
    assert (status != OK).all(), status
    assert status[-1] == HEADER


@EACH_COPIER
def test_damaged_tables_are_refused_where_libzstd_refuses_them(lib, copier):
    """Frames whose headers and tables are damaged: every one the kernels decode, libzstd decodes to
    the same bytes."""
    frames, sizes = table_fuzzed(3000, 5)
    status, got = decode(lib, frames, sizes, copier=copier)
    both, differ = disagreements(
        frames, sizes, [g if st == OK else None for st, g in zip(status, got, strict=True)]
    )
    assert both > 0 and differ == 0


@EACH_COPIER
def test_what_libzstd_refuses_the_kernels_refuse(lib, copier):
    """Each of ``REFUSED_BY_LIBZSTD``, and a frame whose matches reach past its window, gets a status."""
    window, data = past_the_window()
    frames = [bytes.fromhex(h) for h, _ in REFUSED_BY_LIBZSTD.values()] + [window]
    sizes = [n for _, n in REFUSED_BY_LIBZSTD.values()] + [len(data)]
    for f in frames[:-1]:
        with pytest.raises(RuntimeError):
            Zstd().decode(f)  # numcodecs, as the pipeline calls libzstd
    assert bytes(Zstd().decode(window)) != data
    status, _ = decode(lib, frames, sizes, copier=copier)
    named = dict(zip([*REFUSED_BY_LIBZSTD, "past the window"], status.tolist(), strict=True))
    assert all(st == CORRUPT for name, st in named.items() if name != "past the window"), named
    assert named["past the window"] == OFFSET


FUZZ = r"""
import sys
sys.path.insert(0, {tests!r})
import test_zstd_c as t
lib = t.ctypes.CDLL({so!r})
frames, sizes = t.fuzzed((3000, 70_000, 300_000), 25, 7, (1, 3, 19))
total = flagged = differ = 0
for copier in t.COPIERS:
    status, got = t.decode(lib, frames, sizes, copier=copier)
    both, d = t.disagreements(frames, sizes, [g if st == 0 else None for st, g in zip(status, got)])
    total, flagged, differ = total + len(frames), flagged + int((status != 0).sum()), differ + d
print(total, flagged, differ)
"""


def test_fuzzed_frames_stay_in_bounds(tmp_path):
    """Random byte changes to sound frames, decoded by an AddressSanitizer build: every read and write
    stays inside its buffer whatever the headers claim, and where both libzstd and this decoder accept
    a frame they give the same bytes."""
    asan = subprocess.run(
        ["cc", "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    if not os.path.isabs(asan):
        pytest.skip("no libasan")
    so = tmp_path / "zs_asan.so"
    _build(so, "-fsanitize=address", "-fno-omit-frame-pointer")  # loaded only where libasan comes first
    code = FUZZ.format(tests=os.path.dirname(__file__), so=str(so))
    env = {**os.environ, "LD_PRELOAD": asan, "ASAN_OPTIONS": "detect_leaks=0"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    total, flagged, differ = map(int, run.stdout.split())
    assert total == len(COPIERS) * 3 * 25 * len(_kinds(1, 0)) and flagged > 0 and differ == 0
