"""Planning: every element of a block maps to exactly one stored-chunk element."""

import dask
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarr_dask_gpu import MetadataError
from zarr_dask_gpu.config import DEFAULTS
from zarr_dask_gpu.joining import joins
from zarr_dask_gpu.plan import block_chunks, block_pieces, decode_calls, read_groups


@st.composite
def boxes(draw):
    ndim = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(0, 40)) for _ in range(ndim))
    chunks = tuple(draw(st.integers(1, 12)) for _ in range(ndim))
    start = tuple(draw(st.integers(0, n)) for n in shape)
    stop = tuple(draw(st.integers(a, n)) for a, n in zip(start, shape, strict=True))
    return shape, chunks, start, stop


@settings(max_examples=300, deadline=None)
@given(boxes())
def test_every_block_element_maps_to_one_chunk_element(box):
    _, chunks, start, stop = box
    block_shape = tuple(b - a for a, b in zip(start, stop, strict=True))
    hits = np.zeros(block_shape, dtype=int)
    for p in block_pieces(start, stop, chunks):
        for c, cs, bs, a, n in zip(p.coords, p.chunk_sel, p.block_sel, start, chunks, strict=True):
            assert 0 <= cs.start < cs.stop <= n  # inside the chunk
            assert cs.stop - cs.start == bs.stop - bs.start
            assert c * n + cs.start == a + bs.start  # same global element on both sides
        hits[p.block_sel] += 1
    assert (hits == 1).all()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 300), min_size=1, max_size=3),
    st.lists(st.integers(1, 40), min_size=3, max_size=3),
    st.integers(1, 64 * 1024),
)
def test_default_blocks_are_whole_chunks(shape, stored, limit):
    shape = tuple(shape)
    stored = tuple(stored[: len(shape)])
    try:
        blocks = block_chunks(None, shape, stored, np.dtype("f4"), limit)
    except MetadataError as e:  # refused only where even blocks of one stored chunk are too many
        chunks = int(np.prod([-(-n // c) for c, n in zip(stored, shape, strict=True)]))
        assert "max-blocks" in str(e) and chunks > DEFAULTS["max-blocks"]
        return
    for axis_blocks, c, n in zip(blocks, stored, shape, strict=True):
        assert sum(axis_blocks) == n
        assert all(b % c == 0 for b in axis_blocks[:-1])  # aligned to the stored grid
        assert axis_blocks[0] >= min(c, n)  # never smaller than one stored chunk
    one_block = int(np.prod([b[0] for b in blocks])) * 4
    one_chunk = int(np.prod([min(c, n) for c, n in zip(stored, shape, strict=True)])) * 4
    assert one_block <= max(limit, one_chunk)


def test_user_chunk_forms():
    f4 = np.dtype("f4")
    assert block_chunks(10, (25,), (4,), f4, "1MiB") == ((10, 10, 5),)
    assert block_chunks({0: 5}, (10, 4), (4, 4), f4, "1MiB") == ((5, 5), (4,))
    assert block_chunks("64B", (64,), (4,), f4, "1MiB") == ((16, 16, 16, 16),)
    assert block_chunks("auto", (64,), (4,), f4, "64B") == ((16, 16, 16, 16),)


@pytest.mark.parametrize(
    "chunks,shape,stored",
    [
        (None, (2**31, 2**31), (1, 1)),
        (8, (2**40,), (1,)),
        ({0: 16}, (2**40,), (1,)),
        ((1024,), (2**40,), (1,)),
        ("1KiB", (2**40,), (1,)),
    ],
    ids=["default", "int", "dict", "tuple", "bytes"],
)
def test_more_blocks_than_the_bound_raise_before_dask_lists_them(chunks, shape, stored):
    with pytest.raises(MetadataError, match=r"/data/a\.zarr: shape .* more than zarr_dask_gpu\.max-blocks"):
        block_chunks(chunks, shape, stored, np.dtype("u1"), "1KiB", array="/data/a.zarr")


def test_max_blocks_is_a_setting():
    u1 = np.dtype("u1")
    with dask.config.set({"zarr_dask_gpu.max-blocks": 3}):
        with pytest.raises(MetadataError, match="makes 4 dask blocks"):
            block_chunks(4, (16,), (4,), u1, "1KiB")
        assert block_chunks(4, (12,), (4,), u1, "1KiB") == ((4, 4, 4),)
    assert block_chunks(4, (16,), (4,), u1, "1KiB") == ((4, 4, 4, 4),)


@settings(max_examples=300, deadline=None)
@given(boxes(), st.sampled_from([1, 2, 8]))
def test_direct_offsets_are_exactly_the_whole_chunks_lying_contiguous(box, itemsize):
    """A piece gets an offset exactly when its chunk is whole and its elements are one run of the
    C-order block starting there (checked element by element); -1 otherwise."""
    from zarr_dask_gpu.plan import direct_offsets

    _, chunks, start, stop = box
    block = tuple(b - a for a, b in zip(start, stop, strict=True))
    pieces = block_pieces(start, stop, chunks)
    got = direct_offsets(pieces, block, chunks, itemsize)
    flat = np.arange(int(np.prod(block))).reshape(block)
    for p, off in zip(pieces, got.tolist(), strict=True):
        whole = all(s.start == 0 and s.stop == c for s, c in zip(p.chunk_sel, chunks, strict=True))
        run = flat[p.block_sel].ravel()
        contiguous = whole and bool((np.diff(run) == 1).all())
        assert (off >= 0) == contiguous
        if contiguous:
            assert off == run[0] * itemsize


def test_direct_offsets_mark_whole_contiguous_chunks():
    from zarr_dask_gpu.plan import direct_offsets

    # rows of whole-width chunks: every interior chunk is one run of the block
    pieces = block_pieces((4, 0), (12, 6), (2, 6))
    assert direct_offsets(pieces, (8, 6), (2, 6), 4).tolist() == [0, 48, 96, 144]
    # a block that cuts chunks, and chunks narrower than the block: nothing runs contiguously
    assert (direct_offsets(block_pieces((1, 0), (5, 6), (2, 6)), (4, 6), (2, 6), 4) == [-1, 24, -1]).all()
    assert (direct_offsets(block_pieces((0, 0), (2, 6), (2, 3)), (2, 6), (2, 3), 4) == -1).all()
    # one row of chunks along the last axis, and single-element leading axes (3-d)
    assert direct_offsets(block_pieces((0, 0), (1, 6), (1, 3)), (1, 6), (1, 3), 8).tolist() == [0, 24]
    got = direct_offsets(block_pieces((0, 0, 0), (2, 2, 5), (1, 2, 5)), (2, 2, 5), (1, 2, 5), 2)
    assert got.tolist() == [0, 20]
    # a partial edge chunk (the array ends inside it) is never decoded in place
    assert direct_offsets(block_pieces((0, 0), (3, 4), (2, 4)), (3, 4), (2, 4), 1).tolist() == [0, -1]


def test_direct_offsets_agree_with_numpy_layout():
    from zarr_dask_gpu.plan import direct_offsets

    rng = np.random.default_rng(0)
    for _ in range(200):
        nd = int(rng.integers(1, 4))
        chunks = tuple(int(c) for c in rng.integers(1, 4, nd))
        start = tuple(int(s) for s in rng.integers(0, 5, nd))
        stop = tuple(a + int(n) for a, n in zip(start, rng.integers(1, 7, nd), strict=True))
        block = tuple(b - a for a, b in zip(start, stop, strict=True))
        pieces = block_pieces(start, stop, chunks)
        flat = np.arange(int(np.prod(block))).reshape(block)
        for p, off in zip(pieces, direct_offsets(pieces, block, chunks, 1), strict=True):
            region = flat[p.block_sel].ravel()
            if off >= 0:  # the whole chunk, as one run starting there
                assert region.size == np.prod(chunks)
                assert region.tolist() == list(range(off, off + region.size))
            else:  # and every such run is found
                assert not (region.size == np.prod(chunks) and (np.diff(region) == 1).all())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=60), st.integers(1, 3000))
def test_decode_calls_cover_the_batch_in_order_within_the_limit(sizes, limit):
    calls = decode_calls(np.array(sizes), limit)
    assert np.array_equal(np.concatenate(calls), np.arange(len(sizes)))
    assert all(len(c) for c in calls)
    for c in calls:  # over the limit by less than one item (its first, which may straddle a multiple)
        assert sum(sizes[i] for i in c[1:]) <= limit
    assert len(decode_calls(np.array(sizes), None)) == 1


def test_a_batch_joins_others_calls_while_its_items_average_below_the_bound_and_are_few():
    mib = 1 << 20
    assert joins(np.array([8 * mib] * 256), 64 * mib, 8192)  # A-large: 256 chunks of 8 MiB
    assert not joins(np.array([32 << 10] * 16384), 64 * mib, 8192)  # E: a task's blosc inner streams
    assert not joins(np.array([32 << 10] * 8192), 64 * mib, 8192)  # at the count: alone
    assert joins(np.array([32 << 10] * 16384), 64 * mib) and joins(
        np.array([32 << 10] * 8191), 64 * mib, 8192
    )
    assert not joins(np.array([256 * mib] * 2), 64 * mib)  # Ez: two frames of 256 MiB
    assert not joins(np.array([64 * mib]), 64 * mib)  # at the bound: alone
    assert joins(np.array([256 * mib, 1]), None) and joins(np.array([], dtype=np.int64), 64 * mib)


def test_default_block_size_leaves_every_thread_work():
    from types import SimpleNamespace

    from zarr_dask_gpu.graph import default_block_size

    def info(gib):
        return SimpleNamespace(shape=(int(gib * 2**28),), dtype=np.dtype("f4"))

    assert default_block_size(info(16), "gpu") == 1 << 30  # 16 GiB: blocks of the GPU's default size
    assert default_block_size(info(4), "gpu") == 1 << 30  # 4 GiB: 4 blocks of 1 GiB
    assert default_block_size(info(1), "gpu") == 256 << 20  # 1 GiB: 4 blocks of 256 MiB
    assert default_block_size(info(0.1), "gpu") == 32 << 20  # never under 32 MiB
    assert default_block_size(info(16), "cpu") == 256 << 20  # the CPU's default size
    assert default_block_size(info(1), "cpu") <= (1 << 30) // 4  # several per core
    with dask.config.set({"zarr_dask_gpu.block-size": "64MiB"}):  # set: the size on both
        assert default_block_size(info(16), "gpu") == default_block_size(info(16), "cpu") == 64 << 20


@given(st.lists(st.one_of(st.none(), st.integers(0, 100)), max_size=40), st.integers(1, 150))
def test_read_groups_cover_the_units_in_order_each_about_the_limit(sizes, limit):
    groups = read_groups(sizes, limit)
    assert [i for g in groups for i in g] == list(range(len(sizes)))
    assert all(groups)
    for g in groups[:-1]:  # a group closes once it holds the limit, not before
        held = sum(sizes[i] or 0 for i in g)
        assert held >= limit and held - (sizes[g[-1]] or 0) < limit


def test_units_of_unknown_size_are_read_in_one_group():
    assert read_groups([5, -1, None, 7], 1) == [[0, 1, 2, 3]]
    assert read_groups([], 1) == []
