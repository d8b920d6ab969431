"""The items of a decode: compressed byte ranges of one device buffer and where each decodes, one
row an item, with the owner each belongs to, so that a failure found at any stage (the structure
check, a decoder, the reference library's verdict) is named by its owner once, not translated back
through each stage's subset."""

from dataclasses import dataclass

import cupy as cp
import numpy as np


@dataclass(frozen=True)
class Items:
    """Item ``i`` is ``sizes[i]`` bytes at ``offsets[i]`` of ``buffer``, decoded into exactly
    ``out_sizes[i]`` bytes at device address ``dst[i]``; ``owner[i]`` is what it belongs to, as its
    caller counts (a chunk of a merged batch, a blosc frame)."""

    buffer: cp.ndarray
    offsets: np.ndarray
    sizes: np.ndarray
    dst: np.ndarray
    out_sizes: np.ndarray
    owner: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def src(self) -> np.ndarray:
        """Each item's device address."""
        return np.uint64(self.buffer.data.ptr) + self.offsets.astype(np.uint64)

    def take(self, rows: np.ndarray) -> "Items":
        """The items at ``rows``, their owners kept."""
        return Items(
            self.buffer,
            self.offsets[rows],
            self.sizes[rows],
            self.dst[rows],
            self.out_sizes[rows],
            self.owner[rows],
        )

    def owned(self, failed: list[tuple[int, str]]) -> list[tuple[int, str]]:
        """Failures as (row, reason) as (owner, reason)."""
        return [(int(self.owner[j]), why) for j, why in failed]
