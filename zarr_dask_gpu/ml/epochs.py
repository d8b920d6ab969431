"""Epoch plans for training loaders: which samples go into which batch, on which rank, in what order.

Pure numpy (no torch, no zarr): the loader (``ml/loader.py``) turns a plan into reads. A sample is a box
with an origin on the "tiled" dimensions (sample dimensions, of size 1, and patch dimensions); its
group is the combination of read units (chunks, or shards' inner chunks) holding its origin, in every
array. A plan of one epoch, for every rank alike from ``(seed, epoch)``:

1. the groups are put in a random order;
2. their samples, concatenated in that order, are cut into ``world_size`` contiguous shares whose sizes
   differ by at most one sample (``drop_last``: the ``N % world_size`` last samples go, so shares are
   equal); a group is split between two ranks only at a cut, so at most ``world_size - 1`` groups are;
3. each rank takes its share's group parts ``shuffle_buffer`` at a time and shuffles the samples of
   those parts together;
4. and cuts the result into batches of ``batch_size`` (``drop_last``: without the short last one).

So every sample is in exactly one batch of one rank per epoch (bar ``drop_last``), the same seed and
epoch give the same plan, and each group part's samples come within one run of ``shuffle_buffer``
parts: the loader reads its window once and frees it after the run.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def sample_origins(
    sizes: Sequence[int],
    shape: Sequence[int],
    stride: Sequence[int] | None = None,
    *,
    random: bool = False,
    count: int | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Origins ``(n, k)`` of samples of ``shape`` in an array of ``sizes`` along the k tiled dims.

    Regular: the starts ``0, stride, 2 * stride, ...`` that fit (``stride`` defaults to ``shape``:
    patches that tile the array). ``random``: ``count`` origins (default: as many as the regular grid
    has) drawn uniformly from every position where a sample fits, with ``rng``.

    Raises
    ------
    ValueError
        A sample is larger than the array along some dimension, or a stride is not positive.
    """
    sizes, shape = tuple(map(int, sizes)), tuple(map(int, shape))
    stride = tuple(map(int, stride)) if stride is not None else shape
    if len(sizes) != len(shape) or len(stride) != len(shape):
        raise ValueError(f"sizes {sizes}, shape {shape} and stride {stride} differ in length")
    for axis, (n, p, s) in enumerate(zip(sizes, shape, stride, strict=True)):
        if not 1 <= p <= n:
            raise ValueError(f"sample shape {shape} does not fit an array of {sizes} (axis {axis})")
        if s < 1:
            raise ValueError(f"stride {stride} must be positive")
    starts = [np.arange(0, n - p + 1, s) for n, p, s in zip(sizes, shape, stride, strict=True)]
    if not random:
        if not starts:
            return np.zeros((1, 0), dtype=np.int64)
        mesh = np.meshgrid(*starts, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1).astype(np.int64)
    if rng is None:
        raise ValueError("random origins need an rng")
    n = int(np.prod([len(s) for s in starts])) if count is None else int(count)
    high = np.array([size - p + 1 for size, p in zip(sizes, shape, strict=True)], dtype=np.int64)
    return rng.integers(0, high, size=(n, len(sizes)), dtype=np.int64)


def chunk_groups(origins: np.ndarray, grids: Sequence[Sequence[int]]) -> np.ndarray:
    """The group of each sample: samples whose origins share a read unit of any array are in one
    group (the connected components), so that each read unit holding an origin is in one group only.

    ``grids`` has, per array, its read-unit shape along the tiled dims (a huge number along a dim it
    lacks).
    """
    n = len(origins)
    if n == 0 or origins.shape[1] == 0 or not grids:
        return np.zeros(n, dtype=np.int64)
    keys = [
        np.unique(origins // np.asarray(g, dtype=np.int64), axis=0, return_inverse=True)[1].reshape(-1)
        for g in grids
    ]
    label = np.arange(n, dtype=np.int64)
    while True:  # each sample takes the least label of the samples it shares a read unit with
        old = label
        for k in keys:
            least = np.full(int(k.max()) + 1, n, dtype=np.int64)
            np.minimum.at(least, k, label)
            label = least[k]
        if np.array_equal(label, old):
            break
    return np.unique(label, return_inverse=True)[1].reshape(-1).astype(np.int64)


def share_bounds(n: int, rank: int, world_size: int, drop_last: bool) -> tuple[int, int]:
    """``[start, stop)`` of rank ``rank``'s share of ``n`` samples in the epoch's order."""
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not one of world_size {world_size}")
    if drop_last:
        q = n // world_size
        return rank * q, (rank + 1) * q
    q, r = divmod(n, world_size)
    start = rank * q + min(rank, r)
    return start, start + q + (rank < r)


def batch_count(n: int, batch_size: int, rank: int, world_size: int, drop_last: bool) -> int:
    """How many batches rank ``rank`` gets of ``n`` samples per epoch."""
    start, stop = share_bounds(n, rank, world_size, drop_last)
    m = stop - start
    return m // batch_size if drop_last else -(-m // batch_size)


@dataclass(frozen=True)
class EpochPlan:
    """One rank's epoch.

    Attributes
    ----------
    batches
        The sample indices of each batch, in order.
    parts
        For each batch, the group parts (windows) first needed by it: ``(group, sample indices)``,
        the indices being every sample of that group this rank reads this epoch.
    last_use
        For each group, the index of the last batch that needs it.
    """

    batches: list[np.ndarray]
    parts: list[list[tuple[int, np.ndarray]]]
    last_use: dict[int, int]


def plan_epoch(
    groups: np.ndarray,
    batch_size: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    rank: int = 0,
    world_size: int = 1,
    drop_last: bool = False,
    shuffle: bool = True,
    shuffle_buffer: int = 4,
) -> EpochPlan:
    """Rank ``rank``'s batches of the samples whose groups are ``groups`` (module docstring).

    Without ``shuffle`` the order is the samples' (groups by first sample), unshuffled.
    """
    if batch_size < 1 or shuffle_buffer < 1:
        raise ValueError(f"batch_size and shuffle_buffer must be positive: {batch_size}, {shuffle_buffer}")
    groups = np.asarray(groups, dtype=np.int64)
    rng = np.random.default_rng([seed, epoch])  # the same on every rank
    ids, first = np.unique(groups, return_index=True)
    order = rng.permutation(len(ids)) if shuffle else np.argsort(first, kind="stable")
    rank_of_group = np.empty(len(ids), dtype=np.int64)
    rank_of_group[order] = np.arange(len(ids))
    position = rank_of_group[np.searchsorted(ids, groups)]  # each sample's group's place in the order
    sequence = np.lexsort((np.arange(len(groups)), position))  # samples, group by group
    start, stop = share_bounds(len(sequence), rank, world_size, drop_last)
    share = sequence[start:stop]
    # group parts: runs of one group in the share
    share_groups = groups[share]
    cuts = np.flatnonzero(np.diff(share_groups)) + 1
    part_samples = np.split(share, cuts) if len(share) else []
    mine = np.random.default_rng([seed, epoch, rank + 1])
    ordered: list[np.ndarray] = []
    for b in range(0, len(part_samples), shuffle_buffer):
        run = np.concatenate(part_samples[b : b + shuffle_buffer])
        ordered.append(mine.permutation(run) if shuffle else run)
    samples = np.concatenate(ordered) if ordered else np.zeros(0, dtype=np.int64)
    n_batches = len(samples) // batch_size if drop_last else -(-len(samples) // batch_size)
    batches = [samples[i * batch_size : (i + 1) * batch_size] for i in range(n_batches)]
    batch_of = np.full(len(groups), -1, dtype=np.int64)
    for i, batch in enumerate(batches):
        batch_of[batch] = i
    parts: list[list[tuple[int, np.ndarray]]] = [[] for _ in batches]
    last_use: dict[int, int] = {}
    for p in part_samples:
        used = batch_of[p]
        kept = p[used >= 0]  # drop_last may leave some of a part unread
        if len(kept):
            g = int(groups[p[0]])
            parts[int(used[used >= 0].min())].append((g, np.sort(kept)))
            last_use[g] = int(used.max())
    return EpochPlan(batches, parts, last_use)
