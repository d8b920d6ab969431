"""This package's inflate kernel on the GPU (``deflate-decoder: kernels``): every zlib and gzip chunk of
the damage corpus and of the host tests' streams in one batch, each accepted only where the reference
decodes it alike; and arrays of every Deflate chain read through it as zarr-python reads them."""

import dask
import numcodecs
import numpy as np
import pytest
import zarr

from zarr_dask_gpu import ChunkDecodeError, from_zarr_gpu

from .. import damage
from ..helpers import host, sample

pytestmark = pytest.mark.gpu

KERNELS = {"zarr_dask_gpu.deflate-decoder": "kernels"}


def _reference(data: bytes, cap: int, codec: str) -> bytes | None:
    from zarr_dask_gpu.codecs import reference

    try:
        raw = bytes((reference.zlib_at_most if codec == "zlib" else reference.gzip_at_most)(data, cap, None))
    except reference.ERRORS:
        return None
    return raw if len(raw) == cap else None


def _sound(codec: str) -> list[damage.Case]:
    """Streams zlib writes at every level and strategy, over texts whose matches overlap (runs), reach
    far back, or are few: a warp's lanes split their copies and checksums."""
    import zlib

    rng = np.random.default_rng(5)
    smooth = np.cumsum(rng.standard_normal(300_000)).astype(np.float32).round(1).tobytes()
    texts = [
        b"a",
        b"abc" * 13_000,
        rng.integers(0, 256, 70_000, dtype=np.uint8).tobytes(),
        smooth,
        bytes(700_000),
    ]
    wbits = {"zlib": 15, "gzip": 31}[codec]
    out = []
    for raw in texts:
        for level, strategy in ((0, 0), (1, zlib.Z_FIXED), (4, 0), (9, zlib.Z_HUFFMAN_ONLY), (4, zlib.Z_RLE)):
            c = zlib.compressobj(level, zlib.DEFLATED, wbits, 9, strategy)
            label = f"sound:level {level}, strategy {strategy}, {len(raw)} bytes"
            out.append(damage.Case(codec, label, c.compress(raw) + c.flush(), len(raw), 1, {}))
    return out


def test_the_kernel_accepts_in_one_batch_only_what_the_reference_decodes_alike():
    import cupy as cp

    from zarr_dask_gpu.gpu.decoders import inflate

    cases = [c for c in damage.corpus(0, "ci") if c.codec in inflate.WRAPPERS]
    for codec in inflate.WRAPPERS:
        mine = [c for c in cases if c.codec == codec] + _sound(codec)
        blob = cp.asarray(np.frombuffer(b"".join(c.data for c in mine) + b"\0", np.uint8))
        at = np.cumsum([0, *[len(c.data) for c in mine]])
        sizes = np.array([c.size for c in mine], np.int64)
        outs = np.cumsum([0, *sizes])
        out = cp.zeros(int(outs[-1]) + 1, np.uint8)
        refused: list[int] = []

        def fallback(which, refused=refused):
            refused.extend(int(i) for i in which)
            return [(int(i), "left to the host") for i in which]

        stream = cp.cuda.get_current_stream()
        src = np.uint64(blob.data.ptr) + at[:-1].astype(np.uint64)
        dst = np.uint64(out.data.ptr) + outs[:-1].astype(np.uint64)
        done = inflate.launch(codec, src, np.diff(at), dst, sizes, stream, fallback)
        assert len(done.failures()) == len(refused)
        got = out.get()
        accepted = 0
        for j, c in enumerate(mine):
            want = _reference(c.data, c.size, codec)
            if j in refused:
                assert not (c.label.startswith("sound") and want is not None), c.label
                continue
            accepted += 1
            assert got[outs[j] : outs[j + 1]].tobytes() == want, c.label
        assert accepted > 20 and len(refused) > 100


CHAINS = {
    "zlib": (numcodecs.Zlib(4), None),
    "gzip": (numcodecs.GZip(5), None),
    "shuffle-zlib-as-filters": (None, [numcodecs.Shuffle(elementsize=4), numcodecs.Zlib(4)]),
    "blosc-zlib": (numcodecs.Blosc("zlib", shuffle=numcodecs.Blosc.SHUFFLE), None),
}


@pytest.mark.parametrize("chain", list(CHAINS))
def test_deflate_chains_read_through_the_kernel_as_zarr_reads_them(tmp_path, chain):
    compressor, filters = CHAINS[chain]
    a = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(300, 257),
        chunks=(64, 100),
        dtype="f4",
        zarr_format=2,
        compressors=compressor,
        filters=filters,
    )
    a[...] = sample(a.shape, "f4")
    with dask.config.set(KERNELS):
        got = host(from_zarr_gpu(tmp_path / "a.zarr", chunks=(128, 257), device="gpu").compute())
    np.testing.assert_array_equal(got, a[...])


def test_a_damaged_chunk_read_through_the_kernel_raises_naming_it(tmp_path):
    damage.zlib_array(tmp_path / "a.zarr", (64, 64), (16, 64), damaged="2.0")
    with dask.config.set(KERNELS), pytest.raises(ChunkDecodeError, match=r"2\.0"):
        from_zarr_gpu(tmp_path / "a.zarr", device="gpu").compute()
