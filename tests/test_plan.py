"""Planning: every element of a block maps to exactly one stored-chunk element."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from zarr_dask_gpu.plan import block_chunks, block_pieces


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
    blocks = block_chunks(None, shape, stored, np.dtype("f4"), limit)
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
