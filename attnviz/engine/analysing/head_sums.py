"""The sums that heads.score_blocks and heads.score_layers read, gathered over row blocks of a
pattern too large to hold: per role the mass on its detection cells and the chance score's
numerator, the masses with and without exclusions, distance and entropy. heads.py turns them into
the same HeadScores score_heads gives on the whole pattern.
"""

from __future__ import annotations

import numpy as np

from attnviz.engine.analysing.head_patterns import ROLES, detection_rows

EXCLUDING = ("previous", "next", "duplicate", "induction")  # roles the exclusions apply to


class RowSums:
    """The sums score_heads reads, gathered over row blocks: per role the mass on its cells and the
    chance score's numerator, the masses with and without exclusions, distance and entropy."""

    def __init__(self, n_layer, n_head, ids, unknown, causal, exclude_bos, exclude_current_token):
        self.ids, self.unknown, self.causal = np.asarray(ids), unknown, causal
        self.bos, self.cur = exclude_bos, exclude_current_token
        self.T = len(self.ids)
        z = lambda: np.zeros((n_layer, n_head))  # noqa: E731
        self.num = {r: z() for r in ROLES}
        self.chance_num = {r: z() for r in ROLES}
        self.den = {True: z(), False: z()}  # with the exclusions, without
        self.distance, self.entropy = z(), z()
        self._cells = {}  # (a, b) -> per role (cell rows, cell keys, frac [m] plain, frac excluded)

    def _block_cells(self, a, b):
        if (a, b) in self._cells:
            return self._cells[(a, b)]
        T, m = self.T, b - a
        q = np.arange(a, b)[:, None]
        keys = (np.arange(T)[None, :] <= q) if self.causal else np.ones((m, T), dtype=bool)
        excl = np.zeros((m, T), dtype=bool)
        if self.bos:
            excl[:, 0] = True
        if self.cur:
            excl[np.arange(m), np.arange(a, b)] = True
        out = {}
        for role in ROLES:
            d = detection_rows(role, self.ids, a, b, self.unknown)
            use = role in EXCLUDING
            cells = d & ~excl if use else d
            ks = keys & ~excl if use else keys
            n_keys = ks.sum(axis=1)
            frac = np.where(n_keys > 0, (cells & ks).sum(axis=1) / np.maximum(n_keys, 1), 0.0)
            qi, ki = np.nonzero(cells)
            out[role] = (qi, ki, frac)
        self._cells[(a, b)] = out
        return out

    def add(self, layer, a, rows):  # rows [n_head, m, w]: weights of rows a.., keys 0..w-1 (rest 0)
        m, w = rows.shape[1], rows.shape[2]
        b = a + m
        cells = self._block_cells(a, b)
        rowsum = rows.sum(axis=-1, dtype=np.float64)  # [n_head, m]
        lost = np.zeros_like(rowsum)  # the excluded cells' mass per row
        if self.bos:
            lost += rows[:, :, 0]
        if self.cur:
            r = np.arange(m)
            inside = a + r < w
            lost[:, inside] += rows[:, r[inside], (a + r)[inside]]
            if self.bos and a == 0:
                lost[:, 0] -= rows[:, 0, 0]  # counted in both
        mass = {False: rowsum, True: rowsum - lost}
        for excluded in (False, True):
            self.den[excluded][layer] += mass[excluded].sum(axis=-1)
        for role, (qi, ki, frac) in cells.items():
            seen = ki < w
            self.num[role][layer] += rows[:, qi[seen], ki[seen]].sum(axis=-1, dtype=np.float64)
            self.chance_num[role][layer] += mass[role in EXCLUDING] @ frac
        dist = np.abs(np.arange(a, b)[:, None] - np.arange(w)[None, :]).astype(np.float32)  # [m, w]
        self.distance[layer] += (rows * dist).sum(axis=-1, dtype=np.float64).sum(axis=-1)
        lg = np.zeros_like(rows)
        np.log2(rows, out=lg, where=rows > 0)
        lg *= rows
        self.entropy[layer] -= lg.sum(axis=-1, dtype=np.float64).sum(axis=-1)

    def ratio(self, num, den):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 1e-12, num / np.where(den > 1e-12, den, 1.0), np.nan)
