"""Passes over the rows of the data a block at a time, with the results of passes over all rows at once.

A pass over all N rows at once holds temporaries of N rows (or N x P cells, or N x 96 quadrature nodes); a block
holds those of a block. The values of each row do not depend on the block they are computed in, and a sum over
the rows is assembled from the blocks in NumPy's own order (:func:`pairwise_sum`), so that the results are those of
the pass over all rows, bit for bit.

This module imports nothing from slang: every layer (data preparation, scores) can use it.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

# cells (rows x columns) of one block, 2 MB in float64
BLOCK_CELLS = 1 << 18


def row_blocks(n: int, width: int = 1) -> list[slice]:
    """Slices of ``range(n)`` of whole rows ``width`` cells wide, about ``BLOCK_CELLS`` cells each."""
    step = max(8, BLOCK_CELLS // max(width, 1))
    return [slice(lo, lo + step) for lo in range(0, n, step)]


def pairwise_sum(n: int, step: int, values: Callable[[int, int], np.ndarray]):
    """``values(0, n).sum(axis=0)`` as NumPy computes it, bit for bit, from the values of blocks of at most
    ``step`` rows (``values(lo, hi)``: the rows ``lo`` to ``hi`` of a float64 array of N rows, one column or 1-D).

    NumPy adds a column pairwise: it splits n > 128 values at half of n rounded down to a multiple of 8, adds
    each half the same way, and adds the two sums. The blocks are the halves of that same recursion, each summed
    by NumPy."""

    def pairwise(lo, count):
        if count <= step:
            return values(lo, lo + count).sum(axis=0)
        half = count // 2
        half -= half % 8
        return pairwise(lo, half) + pairwise(lo + half, count - half)

    return pairwise(0, n)
