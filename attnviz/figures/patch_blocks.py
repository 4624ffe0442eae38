"""The Patching map (figures/patching.py) drawn smaller than its cells: a long text's positions (or
many layers, or heads) that do not fit at the least cell size are pooled into blocks, each painted
with the effect of its cells farthest from the unchanged one, its sign kept (the Compare tiles' rule
for A − B, patterns.signed_pool), so a lone strong cell is never off the picture; the hover and a
click read the cell a block shows."""

from __future__ import annotations

import math

import numpy as np

LEAST_W, LEAST_H = 3.0, 2.0  # a cell's (or block's) least width and height, in pixels


def pool_for(n: int, room: float, least: float, extra: float = 0.0) -> int:
    """Cells a block along an axis of n cells (and `extra` cells' worth of gaps) in `room`
    pixels, each block at least `least` pixels: 1 where every cell fits (a pooled axis has no gaps)."""
    if n <= 1 or room >= (n + extra) * least:
        return 1
    return math.ceil(n / max(1, int(room // least)))


def blocks(n: int, p: int) -> int:
    """Blocks of p cells along an axis of n (the last takes what is left)."""
    return -(-n // p)


def picks(values: np.ndarray, unchanged: float, pool: tuple[int, int]) -> np.ndarray:  # -> [nr, nc, 2]
    """(row, col) of the cell each block of pool = (rows, cols) cells shows: its effect farthest
    from `unchanged` (the first in row order on a tie), a measured one where the block has any
    (a cell not run is NaN)."""
    pr, pc = pool
    rows, cols = values.shape
    nr, nc = blocks(rows, pr), blocks(cols, pc)
    size = np.full((nr * pr, nc * pc), -np.inf)  # (past the last cell: never picked)
    d = np.abs(np.asarray(values, np.float64) - unchanged)
    size[:rows, :cols] = np.where(np.isfinite(d), d, -1.0)
    best = size.reshape(nr, pr, nc, pc).transpose(0, 2, 1, 3).reshape(nr, nc, pr * pc).argmax(axis=-1)
    r = np.arange(nr)[:, None] * pr + best // pc
    c = np.arange(nc)[None, :] * pc + best % pc
    return np.stack([r, c], axis=-1)


def block_labels(labels: list[str], p: int, prefix: str) -> list[str]:
    """An axis' labels with p cells a block: the cells' own where p is 1, else each block's first
    and last index ("L4–7", "H0–3", "12–15"; `prefix` the axis' letter, "" for positions)."""
    if p <= 1:
        return labels
    n = len(labels)
    return [f"{prefix}{a}\u2013{min(n, a + p) - 1}" if min(n, a + p) - 1 > a else f"{prefix}{a}"
            for a in range(0, n, p)]
