"""The constants of a run of the one last row (a generation step, a keystroke that adds a token),
made for a block of ANGLE_ROWS positions at once and kept: each step of a generation asks the next
position, and each layer's Consts and RoPE row made anew at every position cost a step more Python
than its cut from a block's table. families.layer_consts asks here first for a run of one row."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Callable

import numpy as np

from attnviz.engine.computing.rope import ANGLE_ROWS, rope_tables

ROW_BLOCKS_KEPT = 4  # blocks of ANGLE_ROWS positions whose one-row Consts are kept
UNKEPT_CONFIGS = 16  # configs remembered as having no one-row Consts (a layer with a window)


def row_block(first: list, ropes: list, block: int, d_head: int) -> list | None:
    """first: every layer's Consts of the block's first position (a run of one row: no mask),
    ropes: each layer's RoPE -> per position j of the block, every layer's Consts with the RoPE row
    of position block * ANGLE_ROWS + j, cut from one read-only rope_tables of the block per RoPE
    (rope_row's bits: tests/engine/test_step_path.py); layers that share one Consts at the first
    position share one at each. None where a layer has a window (its mask depends on T)."""
    if any(c.window is not None for c in first):
        return None
    made = {}  # id(a first position's Consts) -> that Consts at each position of the block
    for c, rope in zip(first, ropes, strict=True):
        if id(c) in made:
            continue
        if c.rope is None:  # (no RoPE: the same constants at every position)
            made[id(c)] = [c] * ANGLE_ROWS
            continue
        cos, sin = rope_tables(np.arange(block * ANGLE_ROWS, (block + 1) * ANGLE_ROWS), d_head, rope)
        cos.setflags(write=False)
        sin.setflags(write=False)
        made[id(c)] = [replace(c, rope=(cos[j:j + 1], sin[j:j + 1])) for j in range(ANGLE_ROWS)]
    return [[made[id(c)][j] for c in first] for j in range(ANGLE_ROWS)]


class RowConsts:
    """The one-row Consts of the last `kept` blocks of positions used, per (config, block,
    workers), the least recently used let go first; `make(cfg, block, workers)` makes a block's
    (row_block's list), or None for a config that has none, which is remembered apart and takes no
    block's place. Keyed by the config's id and checked by identity (an id can be a freed config's,
    reused). Safe on several threads (the window's, a comparison's)."""

    def __init__(self, make: Callable, kept: int = ROW_BLOCKS_KEPT):
        self.make, self.kept = make, kept
        self._blocks: OrderedDict = OrderedDict()  # (id(cfg), block, workers) -> (cfg, per position [Consts])
        self._none: dict = {}  # id(cfg) -> cfg: configs `make` gave None
        self._lock = threading.Lock()

    def get(self, cfg, p: int, workers: int) -> list | None:
        """Every layer's Consts of the run of the one row p (T = p + 1), or None: the config has
        none (its run takes layer_consts' other paths)."""
        key = (id(cfg), p // ANGLE_ROWS, workers)
        kept = self._blocks.get(key)
        if kept is not None and kept[0] is cfg:
            try:
                self._blocks.move_to_end(key)  # (the most recently used last)
            except KeyError:  # (another thread let it go meanwhile: still this run's to use)
                pass
            return kept[1][p % ANGLE_ROWS]
        if self._none.get(id(cfg)) is cfg:
            return None
        made = self.make(cfg, p // ANGLE_ROWS, workers)
        with self._lock:
            if made is None:
                if len(self._none) >= UNKEPT_CONFIGS:
                    self._none.clear()
                self._none[id(cfg)] = cfg
                return None
            self._blocks[key] = (cfg, made)
            self._blocks.move_to_end(key)
            while len(self._blocks) > self.kept:
                self._blocks.popitem(last=False)
        return made[p % ANGLE_ROWS]
