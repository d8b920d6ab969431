"""Epoch plans of the training loader (ml/epochs.py): exactly once, deterministic, rank shares, read once."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zarr_dask_gpu.ml.epochs import batch_count, chunk_groups, plan_epoch, sample_origins


@st.composite
def cases(draw):
    n = draw(st.integers(0, 300))
    n_groups = draw(st.integers(1, 40))
    groups = np.sort(draw(st.lists(st.integers(0, n_groups - 1), min_size=n, max_size=n)))
    return (
        np.asarray(groups, dtype=np.int64),
        draw(st.integers(1, 17)),  # batch_size
        draw(st.integers(1, 6)),  # world_size
        draw(st.booleans()),  # drop_last
        draw(st.integers(1, 5)),  # shuffle_buffer
        draw(st.integers(0, 3)),  # seed
        draw(st.integers(0, 3)),  # epoch
    )


def _plans(groups, bs, world, drop_last, buffer, seed, epoch):
    return [
        plan_epoch(
            groups,
            bs,
            seed=seed,
            epoch=epoch,
            rank=r,
            world_size=world,
            drop_last=drop_last,
            shuffle_buffer=buffer,
        )
        for r in range(world)
    ]


@settings(max_examples=300, deadline=None)
@given(cases())
def test_every_sample_once_per_epoch_in_balanced_disjoint_shares(case):
    groups, bs, world, drop_last, *_ = case
    n = len(groups)
    plans = _plans(*case)
    shares = [np.concatenate(p.batches) if p.batches else np.zeros(0, int) for p in plans]
    every = np.concatenate(shares)
    assert len(every) == len(set(every.tolist()))  # disjoint, and no sample twice in a rank
    counts = [len(p.batches) for p in plans]
    assert counts == [batch_count(n, bs, r, world, drop_last) for r in range(world)]
    assert max(counts) - min(counts) <= 1  # balanced within one batch
    if drop_last:
        assert len(set(counts)) == 1  # equal batch counts: no rank waits on another in DDP
        assert all(len(b) == bs for p in plans for b in p.batches)
        assert len(every) >= n - world * bs - world  # only share tails and the N % world go
        assert all(abs(len(a) - len(b)) == 0 for a in shares for b in shares)
    else:
        assert sorted(every.tolist()) == list(range(n))  # complete
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert all(len(b) == bs for p in plans for b in p.batches[:-1])


@settings(max_examples=200, deadline=None)
@given(cases())
def test_each_group_part_is_read_once_by_its_first_batch_and_lives_one_buffer_run(case):
    groups, bs, world, _, buffer, *_ = case
    plans = _plans(*case)
    owners: dict[int, int] = {}
    for p in plans:
        first = {}
        for j, parts in enumerate(p.parts):
            for g, idx in parts:
                assert g not in first  # each group's window is read once per rank and epoch
                first[g] = j
                assert (groups[idx] == g).all()
                owners[g] = owners.get(g, 0) + 1
        read = {int(s) for parts in p.parts for _, idx in parts for s in idx}
        assert read == {int(s) for b in p.batches for s in b}  # the windows hold every sample
        for j, b in enumerate(p.batches):
            for g in set(groups[b].tolist()):
                assert first[g] <= j <= p.last_use[g]  # read before use, freed after the last
        # a window lives while at most shuffle_buffer parts' samples go by, plus one batch each side
        for g, j in first.items():
            assert p.last_use[g] - j <= (buffer * max(np.bincount(groups).max(), 1)) // bs + 2
    assert sum(c > 1 for c in owners.values()) <= world - 1  # only groups at share cuts are split


def test_same_seed_same_order_other_seed_or_epoch_another():
    groups = np.repeat(np.arange(20), 10)
    order = [
        np.concatenate(plan_epoch(groups, 8, seed=s, epoch=e).batches)
        for s, e in [(0, 0), (0, 0), (1, 0), (0, 1)]
    ]
    assert (order[0] == order[1]).all()
    assert not (order[0] == order[2]).all() and not (order[0] == order[3]).all()
    unshuffled = np.concatenate(plan_epoch(groups, 8, shuffle=False).batches)
    assert (unshuffled == np.arange(200)).all()


def test_the_shuffle_buffer_mixes_groups():
    groups = np.repeat(np.arange(50), 20)
    batch = plan_epoch(groups, 20, seed=3, shuffle_buffer=4).batches[0]
    assert len(set(groups[batch].tolist())) > 1
    one = plan_epoch(groups, 20, seed=3, shuffle_buffer=1).batches
    assert all(len(set(groups[b].tolist())) == 1 for b in one)  # a buffer of one group: whole chunks


def test_origins_are_inside_the_array_and_tile_it():
    o = sample_origins((10, 9), (4, 3))
    assert o.tolist() == [[0, 0], [0, 3], [0, 6], [4, 0], [4, 3], [4, 6]]
    assert sample_origins((10,), (4,), (3,)).ravel().tolist() == [0, 3, 6]
    r = sample_origins((10, 9), (4, 3), random=True, count=500, rng=np.random.default_rng(0))
    assert (
        r.shape == (500, 2) and (r >= 0).all() and (r + np.array([4, 3]) <= 10).all() and (r[:, 1] <= 6).all()
    )
    assert r[:, 0].max() == 6 and r[:, 1].max() == 6  # every fitting position can come
    with pytest.raises(ValueError, match=r"does not fit an array of \(10, 9\)"):
        sample_origins((10, 9), (11, 3))


def test_groups_are_the_read_units_of_every_array():
    o = np.array([[0], [3], [4], [7], [8]])
    assert chunk_groups(o, [[4]]).tolist() == [0, 0, 1, 1, 2]
    # chunks of 4 and of 6: 0-3 and 4-5 share the first 6, 6-7 and 8 the second: one group
    assert chunk_groups(o, [[4], [6]]).tolist() == [0, 0, 0, 0, 0]
    assert chunk_groups(np.array([[0], [2], [6], [12]]), [[2], [3]]).tolist() == [0, 0, 1, 2]
    # an array without the second dim joins every origin of its read unit along the first
    o2 = np.array([[0, 0], [0, 5], [5, 0], [5, 5]])
    assert chunk_groups(o2, [[4, 4]]).tolist() == [0, 1, 2, 3]
    assert chunk_groups(o2, [[4, 4], [4, np.iinfo(np.int64).max]]).tolist() == [0, 0, 1, 1]
