"""The block-parallel zstd decoder on the GPU (``gpu/kernels/zstd.cu``, ``zstd_blocks.launch``) against
numcodecs (libzstd), and against nvCOMP on the benchmark's chunks (``decompress.launch``)."""

import dask
import numpy as np
import pytest
from numcodecs import Zstd

from ..codecs.test_zstd_c import (
    LEVELS,
    REFUSED_BY_LIBZSTD,
    SIZES,
    _kinds,
    _sample,
    disagreements,
    fuzzed,
    past_the_window,
    table_fuzzed,
)

pytestmark = pytest.mark.gpu


# each copier, and the frame copier at its long step
KERNELS = pytest.mark.parametrize(
    "copier,step",
    [("frames", "short"), ("waves", None), ("warps", None), ("frames", "long")],
)


def gpu_decode(
    frames: list[bytes],
    expected: list[int],
    decoder: str = "blocks",
    copier: str | None = None,
    step: str | None = None,
    defines: dict[str, int] | None = None,
):
    """Each frame's output (None where it failed) and the failures, from one batched launch (the
    kernels' ``copier`` and frame copier's ``step`` forced where given, built with ``defines``)."""
    import cupy as cp

    from zarr_dask_gpu import config
    from zarr_dask_gpu.gpu.decoders import decompress, zstd_blocks
    from zarr_dask_gpu.gpu.runtime.sync import wait

    starts = np.cumsum([0, *[-(-len(f) // 16) * 16 for f in frames]])
    host = np.zeros(int(starts[-1]) + 16, np.uint8)
    for s, f in zip(starts[:-1], frames, strict=True):
        host[s : s + len(f)] = np.frombuffer(f, np.uint8)
    src = cp.asarray(host)
    out_at = np.cumsum([0, *[-(-e // 256) * 256 for e in expected]])
    out = cp.full(int(out_at[-1]) + 256, 0xAB, dtype=np.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    build = zstd_blocks.Build(defines or {}, copier, step)
    items = (
        np.uint64(src.data.ptr) + starts[:-1].astype(np.uint64),
        np.array([len(f) for f in frames], np.uint64),
        np.uint64(out.data.ptr) + out_at[:-1].astype(np.uint64),
        np.array(expected, np.uint64),
    )
    with dask.config.set({"zarr_dask_gpu.zstd-decoder": decoder}), stream:
        if decoder == "blocks":  # the kernels of ``build``, libzstd on the host judging what they refuse
            judge = decompress.on_host("zstd", *items, stream)
            done = zstd_blocks.launch(*items, stream, judge, config.flag("verify-checksums"), build)
        else:
            done = decompress.launch("zstd", *items, stream)
        wait(stream)
        bad = dict(done.failures())
    got = out.get()
    return [
        None if i in bad else got[o : o + e].tobytes()
        for i, (o, e) in enumerate(zip(out_at[:-1], expected, strict=True))
    ], bad


@KERNELS
@pytest.mark.parametrize("level", LEVELS)
def test_decodes_what_libzstd_wrote(level, copier, step):
    frames, want = [], []
    for n in SIZES:
        for data in _kinds(n, seed=n + level + 10).values():
            frames.append(bytes(Zstd(level).encode(data)))
            want.append(data)
    got, bad = gpu_decode(frames, [len(w) for w in want], copier=copier, step=step)
    assert not bad
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, i


def test_the_copier_past_its_deferred_list():
    """Built with room for four deferred entries a step, the frame copier's lanes chase the rest where
    they find them, side by side: the same bytes as libzstd's."""
    frames, want = [], []
    for data in [*_kinds(300_000, seed=5).values(), _sample(2 << 20, seed=6)]:
        frames.append(bytes(Zstd(3).encode(data)))
        want.append(data)
    got, bad = gpu_decode(frames, [len(w) for w in want], copier="frames", defines={"ZS_DEFER": 4})
    assert not bad and got == want


@KERNELS
def test_benchmark_chunks_alike_to_nvcomp(copier, step):
    """Sixteen of the benchmark's 8 MiB chunks (64 zstd blocks, about a million sequences each): the
    copier's waits on earlier blocks of the frame are exercised throughout (by waves: hundreds)."""
    want = [_sample(8 << 20, seed=s) for s in range(16)]
    frames = [bytes(Zstd(0).encode(w)) for w in want]
    ours, bad = gpu_decode(frames, [len(w) for w in want], copier=copier, step=step)
    theirs, bad_nvcomp = gpu_decode(frames, [len(w) for w in want], "nvcomp")
    assert not bad and not bad_nvcomp
    assert ours == want and theirs == want


def test_a_noisy_volume_by_each_copier():
    """Eight chunks of a float32 volume with noise kept to 0.001 (dataset Ez's kind, mostly literals):
    the rule copies them by waves; each copier gives libzstd's bytes."""
    from zarr_dask_gpu.gpu.decoders import zstd_blocks

    rng = np.random.default_rng(4)
    wave = 10 * np.sin(np.linspace(0, 6 * np.pi, 1024, dtype=np.float32))[:, None] * np.ones(1024, np.float32)
    want = [
        np.round(wave[None] + rng.standard_normal((2, 1024, 1024), dtype=np.float32), 3)
        .astype("f4")
        .tobytes()
        for _ in range(8)
    ]
    frames = [bytes(Zstd(0).encode(w)) for w in want]
    for copier in (None, *zstd_blocks.COPIERS):
        got, bad = gpu_decode(frames, [len(w) for w in want], copier=copier)
        assert not bad and got == want, copier


def test_the_rule_picks_a_copier_by_the_chunks_counts():
    """A warp a frame for small frames of few sequences (dataset E's inner streams), by waves for few
    large chunks mostly of literals (Ez's), a thread block a frame for chunks of many sequences (A's)
    or many bytes."""
    from zarr_dask_gpu.gpu.decoders import zstd_blocks

    def picked(blocks: int, lits: int, seqs: int, decoded: int, n: int) -> list[str]:
        names = {v: k for k, v in zstd_blocks.COPIERS.items()}
        counts = np.tile(np.array([blocks, lits, seqs], np.int64), (n, 1))
        return [names[int(c)] for c in zstd_blocks._copiers(counts, np.full(n, decoded, np.int64))]

    assert picked(1, 17_000, 950, 32 << 10, 65536) == ["warps"] * 65536
    assert picked(2048, 200 << 20, 3_000_000, 256 << 20, 8) == ["waves"] * 8
    assert picked(2048, 200 << 20, 3_000_000, 256 << 20, 4096) == ["frames"] * 4096  # too many for waves
    assert picked(64, 120_000, 1_000_000, 8 << 20, 512) == ["frames"] * 512
    assert picked(64, 0, 0, 8 << 20, 512) == ["frames"] * 512  # raw blocks: no sequences, many bytes


def test_the_rule_picks_the_frame_copiers_step_by_the_batchs_chunks():
    """The long step for batches of no more chunks than SMs (on an H200, A's 32 chunks), whose copier
    launches thread blocks that large; zstd.cu's own for more (A's 512); a build that defines its
    ``ZS_STEP`` keeps its own."""
    import cupy as cp

    from zarr_dask_gpu.gpu.decoders import zstd_blocks

    device = cp.cuda.Device().id
    sms = zstd_blocks._sms(device)
    long, short = zstd_blocks.FRAME_STEPS["long"], zstd_blocks.FRAME_STEPS["short"]
    assert zstd_blocks._long_step_launches(device)  # the long copier's registers allow 1024 threads
    assert [zstd_blocks._frame_step(k) for k in (1, sms, sms + 1, 4 * sms)] == [long, long, short, short]
    assert zstd_blocks._frame_step(1, zstd_blocks.Build({"ZS_STEP": 512})) == 512
    assert zstd_blocks._frame_step(1, zstd_blocks.Build(step="short")) == short
    assert zstd_blocks._frame_step(1, zstd_blocks.Build({"ZS_DEFER": 4})) == short  # a build's own step
    with pytest.raises(ValueError, match="ZS_WARPS"):  # the launches are sized by the shared table
        zstd_blocks.Build({"ZS_WARPS": 8})


@KERNELS
def test_frames_as_libzstd_reads_them(copier, step):
    """Two frames in one chunk, skippable frames, a content checksum (verified on the device) and a
    frame without a content size decode to libzstd's bytes; a flipped checksum, a dictionary id and
    bytes after the last frame are refused, each with its reason."""
    data = _sample(300_000)
    two = bytes(Zstd(3).encode(data[:100_000])) + bytes(Zstd(3).encode(data[100_000:]))
    checksummed = bytes(Zstd(3, checksum=True).encode(data))
    skip = b"\x50\x2a\x4d\x18\x04\x00\x00\x00abcd"
    skippable = skip + bytes(Zstd(3).encode(data)) + skip
    flipped = bytearray(checksummed)
    flipped[-1] ^= 0x10
    dict_id = bytearray(bytes(Zstd(3).encode(data)))
    dict_id[4] |= 1
    dict_id[5:5] = b"\x07"
    frames = [two, checksummed, skippable, bytes(flipped), bytes(dict_id), two + b"junk"]
    got, bad = gpu_decode(frames, [300_000] * len(frames), copier=copier, step=step)
    assert got[:3] == [data] * 3
    assert sorted(bad) == [3, 4, 5]
    assert "checksum" in bad[3] and "dictionary" in bad[4] and "after the last" in bad[5]
    with dask.config.set({"zarr_dask_gpu.verify-checksums": False}):
        got, bad = gpu_decode([bytes(flipped)], [300_000])
    assert not bad and got == [data]


def test_offset_codes_past_the_kernels_decode_on_the_host(monkeypatch):
    """A match 130 MiB back (an offset code of 27, a window of 256 MiB) is past what the kernels'
    sequences hold: that chunk goes to libzstd on the host, and decodes."""
    zstandard = pytest.importorskip("zstandard")
    from zarr_dask_gpu.gpu.decoders import host_decode

    head = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    data = head + bytes(129 << 20) + head
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=28, enable_ldm=True)
    far = zstandard.ZstdCompressor(compression_params=params).compress(data)
    assert len(far) < 3 << 19  # the second copy is a match
    seen = []
    real = host_decode.decode
    monkeypatch.setattr(host_decode, "decode", lambda c, src, *a: seen.append(len(src)) or real(c, src, *a))
    near = bytes(Zstd(3).encode(head))
    got, bad = gpu_decode([far, near], [len(data), len(head)])
    assert not bad and got == [data, head] and seen == [1]


@KERNELS
def test_damaged_frames_are_reported(copier, step):
    data = _sample(600_000)
    frame = bytes(Zstd(3).encode(data))
    wrong_size = bytes(Zstd(3).encode(data[:-4]))
    flipped = bytearray(frame)
    flipped[len(frame) // 2] ^= 0xFF  # inside a block's sequences: the FSE states run off
    got, bad = gpu_decode(
        [frame, wrong_size, bytes(flipped), frame],
        [len(data)] * 4,
        copier=copier,
        step=step,
    )
    assert got[0] == data and got[3] == data
    assert 1 in bad and "size" in bad[1]


@KERNELS
def test_fuzzed_frames_agree_with_libzstd(copier, step):
    """Sound frames with random bytes changed, straight into the kernels with no check before them: no
    hang, no fault; every frame they decode, libzstd decodes to the same bytes (what they refuse, the
    pipeline asks libzstd about: tests/codecs/test_damage.py)."""
    frames, sizes = fuzzed((5000, 300_000), 12, 11)
    got, _ = gpu_decode(frames, sizes, copier=copier, step=step)
    both, differ = disagreements(frames, sizes, got)
    assert both > 0 and differ == 0


@KERNELS
def test_damaged_tables_are_refused_where_libzstd_refuses_them(copier, step):
    """Small frames with their headers and tables damaged, straight into the kernels, and the frames
    libzstd refuses that a laxer decoder would take (``REFUSED_BY_LIBZSTD``): each of those fails
    with the kernels' and libzstd's reasons; a frame reaching past its window gets libzstd's bytes;
    every fuzzed frame decoded, libzstd decodes to the same bytes."""
    window, data = past_the_window()
    refused = [bytes.fromhex(h) for h, _ in REFUSED_BY_LIBZSTD.values()]
    frames, sizes = table_fuzzed(3000, 5)
    got, bad = gpu_decode(
        [*refused, window, *frames],
        [*(n for _, n in REFUSED_BY_LIBZSTD.values()), len(data), *sizes],
        copier=copier,
        step=step,
    )
    k = len(refused)
    assert all(got[i] is None and i in bad for i in range(k)), bad
    assert got[k] == bytes(Zstd().decode(window)) != data
    both, differ = disagreements(frames, sizes, got[k + 1 :])
    assert both > 0 and differ == 0


@pytest.mark.parametrize("decoder", ["nvcomp", "blocks"])
@pytest.mark.parametrize("sharded", [False, True])
def test_from_zarr_gpu_through_the_kernels(tmp_path, decoder, sharded):
    """An array of 4 MiB zstd chunks, plain or sharded, read by the whole pipeline through either
    decoder equal to zarr-python's read."""
    import zarr

    from zarr_dask_gpu import from_zarr_gpu

    rows, cols = 8, 1 << 20  # 4 MiB a row of float32
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(rows, cols),
        chunks=(1, cols),
        shards=(4, cols) if sharded else None,
        dtype="f4",
    )
    a[:] = np.frombuffer(_sample(rows * cols * 4, seed=9), "f4").reshape(rows, cols)
    with dask.config.set({"zarr_dask_gpu.zstd-decoder": decoder}):
        got = from_zarr_gpu(str(tmp_path / "a.zarr"), device="gpu").compute(scheduler="threads")
    np.testing.assert_array_equal(got.get(), a[:])
