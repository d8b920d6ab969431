"""The block-parallel zstd decoder on the GPU (``gpu/zstd.cu``, through ``decompress.launch``) against
numcodecs (libzstd), and against nvCOMP on the benchmark's chunks."""

import dask
import numpy as np
import pytest
from numcodecs import Zstd

from .test_zstd_c import LEVELS, SIZES, _kinds, _sample, disagreements, fuzzed

pytestmark = pytest.mark.gpu


def gpu_decode(frames: list[bytes], expected: list[int], decoder: str = "blocks"):
    """Each frame's output (None where it failed) and the failures, from one batched launch."""
    import cupy as cp

    from zarr_dask_gpu.gpu import decompress
    from zarr_dask_gpu.gpu.sync import wait

    starts = np.cumsum([0, *[-(-len(f) // 16) * 16 for f in frames]])
    host = np.zeros(int(starts[-1]) + 16, np.uint8)
    for s, f in zip(starts[:-1], frames, strict=True):
        host[s : s + len(f)] = np.frombuffer(f, np.uint8)
    src = cp.asarray(host)
    out_at = np.cumsum([0, *[-(-e // 256) * 256 for e in expected]])
    out = cp.full(int(out_at[-1]) + 256, 0xAB, dtype=np.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    with dask.config.set({"zarr_dask_gpu.zstd-decoder": decoder}), stream:
        done = decompress.launch(
            "zstd",
            np.uint64(src.data.ptr) + starts[:-1].astype(np.uint64),
            np.array([len(f) for f in frames], np.uint64),
            np.uint64(out.data.ptr) + out_at[:-1].astype(np.uint64),
            np.array(expected, np.uint64),
            stream,
        )
        wait(stream)
        bad = dict(done.failures())
    got = out.get()
    return [
        None if i in bad else got[o : o + e].tobytes()
        for i, (o, e) in enumerate(zip(out_at[:-1], expected, strict=True))
    ], bad


@pytest.mark.parametrize("level", LEVELS)
def test_decodes_what_libzstd_wrote(level):
    frames, want = [], []
    for n in SIZES:
        for data in _kinds(n, seed=n + level + 10).values():
            frames.append(bytes(Zstd(level).encode(data)))
            want.append(data)
    got, bad = gpu_decode(frames, [len(w) for w in want])
    assert not bad
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, i


def test_benchmark_chunks_alike_to_nvcomp():
    """Sixteen of the benchmark's 8 MiB chunks (64 zstd blocks, about a million sequences each): the
    copier's waits on earlier blocks of the frame are exercised throughout."""
    want = [_sample(8 << 20, seed=s) for s in range(16)]
    frames = [bytes(Zstd(0).encode(w)) for w in want]
    ours, bad = gpu_decode(frames, [len(w) for w in want])
    theirs, bad_nvcomp = gpu_decode(frames, [len(w) for w in want], "nvcomp")
    assert not bad and not bad_nvcomp
    assert ours == want and theirs == want


def test_frames_left_to_nvcomp_decode_there():
    """A checksummed frame goes to nvCOMP and decodes; so does a chunk of two frames, of which nvCOMP
    decodes only the first (as before this decoder): reported, not returned short."""
    data = _sample(300_000)
    two = bytes(Zstd(3).encode(data[:100_000])) + bytes(Zstd(3).encode(data[100_000:]))
    checksummed = bytes(Zstd(3, checksum=True).encode(data))
    plain = bytes(Zstd(3).encode(data))
    got, bad = gpu_decode([two, checksummed, plain], [300_000] * 3)
    assert got[1:] == [data] * 2
    assert list(bad) == [0] and "decoded to 100000 bytes" in bad[0]


def test_damaged_frames_are_reported():
    data = _sample(600_000)
    frame = bytes(Zstd(3).encode(data))
    wrong_size = bytes(Zstd(3).encode(data[:-4]))
    flipped = bytearray(frame)
    flipped[len(frame) // 2] ^= 0xFF  # inside a block's sequences: the FSE states run off
    got, bad = gpu_decode([frame, wrong_size, bytes(flipped), frame], [len(data)] * 4)
    assert got[0] == data and got[3] == data
    assert 1 in bad and "size" in bad[1]


def test_fuzzed_frames_agree_with_libzstd_where_both_decode():
    """Sound frames with random bytes changed, after the pipeline's structure check: no hang, no fault;
    where both this decoder and libzstd decode one, they agree."""
    import cupy as cp

    from zarr_dask_gpu.gpu.validate import check_batch

    frames, sizes = fuzzed((5000, 300_000), 12, 11)
    offs = np.cumsum([0, *[len(f) for f in frames]])
    buf = cp.asarray(np.frombuffer(b"".join(frames) + b"\0", np.uint8))
    checked = dict(check_batch(buf, offs[:-1], np.array([len(f) for f in frames]), "zstd", np.array(sizes)))
    keep = [i for i in range(len(frames)) if i not in checked]
    got, _ = gpu_decode([frames[i] for i in keep], [sizes[i] for i in keep])
    both, differ = disagreements([frames[i] for i in keep], [sizes[i] for i in keep], got)
    assert both > 0 and differ == 0


def test_auto_takes_the_kernels_for_large_chunks(monkeypatch):
    from zarr_dask_gpu.gpu import decompress, zstd_blocks

    chosen = []
    real = zstd_blocks.launch
    monkeypatch.setattr(zstd_blocks, "launch", lambda *a: chosen.append(len(a[0])) or real(*a))
    large, small = _sample(4 << 20, seed=1), _sample(1 << 20, seed=2)
    got, bad = gpu_decode([bytes(Zstd(3).encode(large))], [len(large)], "auto")
    assert not bad and got == [large] and chosen == [1]
    got, bad = gpu_decode([bytes(Zstd(3).encode(small))], [len(small)], "auto")
    assert not bad and got == [small] and chosen == [1]  # nvCOMP's
    assert decompress.zstd_decoder(np.array([4 << 20, 4 << 20])) == "blocks"


@pytest.mark.parametrize("decoder", ["auto", "blocks"])
@pytest.mark.parametrize("sharded", [False, True])
def test_from_zarr_gpu_through_the_kernels(tmp_path, decoder, sharded):
    """An array of 4 MiB zstd chunks (the kernels under "auto"), plain or sharded, read by the whole
    pipeline equal to zarr-python's read."""
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
