"""The focus view's picture of one head, pooled for the view box it is drawn in; no widgets.

The focus view stretches one head's T x T pattern over its view box: query rows over its height,
keys over its width. Qt scales the picture by nearest pixel, so a picture pixel drawn smaller than
a screen pixel may not be painted at all, and with it a row or a column (a one-token diagonal, one
strong query row). So rows and keys are each pooled, as the grid pools its heads (grid_fit.py): a
picture pixel shows the largest weight of its block of rows and keys, blank only where every row of
the block is undefined (Hide first token: patterns.pooled_undefined), with the fewest tokens a pixel
that give each picture pixel a screen pixel of its own, the view's padding counted.

Qt's raster engine draws the picture, unsmoothed, into its rect on the screen rounded to whole
pixels, each screen pixel the picture pixel at its centre in 16.16 fixed point (painted.py
painted_index); the pointer reads the cell of the picture pixel painted under it by the same arithmetic."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from attnviz.engine.computing.patterns import max_pool, no_weight_rows, pooled_undefined

PAD = 0.01  # the view's margin around the picture, a share of its extent on each side (FocusView)


def axis_pool(n_tok: int, px: float) -> int:
    """Tokens a picture pixel holds along an axis `px` screen pixels long: the fewest for which its
    ceil(n_tok / pool) pixels fit in the screen pixels the picture is painted on (its span less the
    view's padding, one pixel less for the rounding of its edges: painted_index)."""
    room = math.floor(px / (1 + 2 * PAD)) - 1
    return max(1, math.ceil(n_tok / max(room, 1)))


@dataclass(frozen=True)
class Picture:
    """One head's pattern as drawn, in token coordinates: pixel (i, j) shows query rows
    i*pool.. and keys x0 + j*key_pool.., each block's largest shown weight (NaN: undefined)."""

    values: np.ndarray  # [n_rows, n_cols] float32
    x0: int  # the first key drawn: 1 where the hidden first key is a gap (a pixel a key), else 0
    pool: int  # query rows a pixel
    key_pool: int  # keys a pixel

    @property
    def pooled(self) -> bool:
        return self.pool > 1 or self.key_pool > 1

    @property
    def extent(self) -> tuple[int, int]:
        """(keys, rows) the picture reaches from 0, in tokens: the last block is drawn whole."""
        n_rows, n_cols = self.values.shape
        return self.x0 + n_cols * self.key_pool, n_rows * self.pool

    def rect(self) -> tuple[int, int, int, int]:  # (x, y, width, height) in tokens
        w, h = self.extent
        return self.x0, 0, w - self.x0, h

    def block(self, q: int, k: int) -> tuple[int, int, int, int]:
        """(key, row, width, height) in tokens of the pixel that holds cell (q, k)."""
        k0 = self.x0 + (k - self.x0) // self.key_pool * self.key_pool
        return k0, q // self.pool * self.pool, self.key_pool, self.pool


def picture(values: np.ndarray, k0: int, hide_first: bool, pool: int, key_pool: int) -> Picture:
    """One head's shown weights of its shown keys, values [T, T - k0] (k0 = 1: the first key hidden),
    pooled `pool` query rows and `key_pool` keys a pixel. A hidden first key stays a gap at a pixel
    a key; pooled, it counts as a 0 in its block (as in the grid). Under Hide first token a row with
    no weight left is NaN (blank), a pooled one where every row of its block is."""
    values = np.asarray(values, np.float32)
    undefined = no_weight_rows(values) if hide_first else None
    x0 = k0
    if key_pool > 1 and k0:
        full = np.zeros((len(values), k0 + values.shape[1]), np.float32)
        full[:, k0:] = values
        values, x0 = full, 0
    pooled = max_pool(values, pool, key_pool)
    if undefined is not None:
        pooled = np.where(pooled_undefined(undefined, pool)[:, None], np.float32(np.nan), pooled)
    return Picture(pooled, x0, pool, key_pool)
