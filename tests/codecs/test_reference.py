"""``codecs/reference.py``, the GPU path's host decoder for what its device decoders refuse or do not
take, gives numcodecs' verdict on every chunk of the damage corpus (tests/damage.py), writing no
more than the chunk's size."""

import collections
import gzip
import io
import zlib

import numpy as np
import pytest

from zarr_dask_gpu.codecs import reference as host
from zarr_dask_gpu.codecs.compressions import check, decode_into

from ..damage import corpus, numcodecs_hangs, reference


def test_the_host_decoder_gives_the_reference_verdict_on_the_corpus():
    verdicts = collections.Counter()
    wrong = []
    for case in corpus(0, "ci"):
        if case.codec == "zstd" and numcodecs_hangs(case.data):  # refused before numcodecs sees them
            assert check("zstd", case.data, case.size), case.label
            verdicts["zstd hangs numcodecs", False] += 1
            continue
        kind = "blosc-lz4" if case.codec.startswith("blosc") else case.codec  # one check and c-blosc for all
        out = np.zeros(case.size, np.uint8)
        why = decode_into(kind, case.data, out)
        want = reference(case)
        verdicts[case.codec, why is None] += 1
        if (why is None) != (want is not None) or (why is None and out.tobytes() != want):
            wrong.append((case.codec, case.label, why))
    assert not wrong, wrong[:20]
    assert verdicts["zstd hangs numcodecs", False] > 0
    assert all(verdicts[c, True] and verdicts[c, False] for c, _ in verdicts if c != "zstd hangs numcodecs")


def _zlib_oracle(data: bytes, limit: int) -> bytes:
    """zlib's own decode of a stream to at most ``limit`` bytes, as ``reference.zlib_at_most`` says."""
    d = zlib.decompressobj()
    raw = d.decompress(data, limit + 1)
    if not d.eof or len(raw) > limit:
        raise ValueError("truncated or too long")
    return raw


def _gzip_oracle(data: bytes, limit: int) -> bytes:
    """Python's gzip module's read of a chunk (several members, zero padding), to at most ``limit``."""
    with gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb") as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise ValueError("too long")
    return raw


def _deflate_streams(wrap: str) -> list[tuple[bytes, int]]:
    """zlib or gzip streams of every block kind (stored, fixed and dynamic Huffman, several blocks),
    two-member gzip chunks among them, and the size each decodes to."""
    rng = np.random.default_rng(7)
    smooth = np.cumsum(rng.standard_normal(20_000)).astype(np.float32).round(1).tobytes()
    texts = [b"", b"a", b"abcabcabc" * 40, rng.integers(0, 256, 3000, dtype=np.uint8).tobytes(), smooth]
    strategies = [(0, zlib.Z_DEFAULT_STRATEGY), (1, zlib.Z_FIXED), (6, zlib.Z_DEFAULT_STRATEGY)]
    strategies += [(9, zlib.Z_HUFFMAN_ONLY), (4, zlib.Z_RLE)]
    out = []
    for raw in texts:
        for level, strategy in strategies:
            c = zlib.compressobj(level, zlib.DEFLATED, 15 if wrap == "zlib" else 31, 9, strategy)
            out.append((c.compress(raw) + c.flush(), len(raw)))
        if wrap == "gzip":
            out.append((gzip.compress(raw[: len(raw) // 2]) + gzip.compress(raw[len(raw) // 2 :]), len(raw)))
    return out


@pytest.mark.parametrize(
    "wrap, ours, oracle",
    [("zlib", host.zlib_at_most, _zlib_oracle), ("gzip", host.gzip_at_most, _gzip_oracle)],
)
def test_the_host_inflates_as_zlib_does(wrap, ours, oracle):
    """The host's Deflate decoder (zlib-ng) against zlib itself (Python's ``zlib`` and ``gzip``),
    over sound streams of every block kind and thousands of damaged ones (bits flipped anywhere:
    block headers, code lengths, symbols, checksums; cut short; bytes appended; limits below and
    above the decoded size): the same bytes, or a refusal, every time."""
    rng = np.random.default_rng(11)
    counts = collections.Counter()
    for data, size in _deflate_streams(wrap):
        variants = [(data, size), (data, size + 7), (data, max(size - 1, 0)), (data + b"tail", size)]
        for _ in range(400):
            d = bytearray(data)
            for _ in range(int(rng.integers(1, 4))):
                pos = int(rng.integers(0, len(d)))
                d[pos] ^= 1 << int(rng.integers(0, 8))
            variants.append((bytes(d), size))
        variants += [(data[:n], size) for n in sorted({int(n) for n in rng.integers(0, len(data), 20)})]
        for stream, limit in variants:
            try:
                want: bytes | None = oracle(stream, limit)
            except (*host.ERRORS, gzip.BadGzipFile):
                want = None
            try:
                got: bytes | None = bytes(ours(stream, limit, None))
            except host.ERRORS:
                got = None
            assert got == want, (stream[:16].hex(), limit)
            counts[want is not None] += 1
    assert counts[True] > 100 and counts[False] > 1000, counts
