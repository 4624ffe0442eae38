"""Rotary position frequencies: the base, and the scalings of them that configs name
(`rope_type` default, linear, llama3, yarn), as transformers' ROPE_INIT_FUNCTIONS compute them.

A `Rope` (engine/reading/config.py, read with the config) is what one layer's RoPE needs; a model
with local and global layers (Gemma 3) has one of each. Pure NumPy.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from attnviz.engine.reading.config import Rope


def inv_freq(rope: Rope, d_head: int) -> np.ndarray:  # -> float64 [d_head / 2]
    """The rotation speed of each pair of dimensions, scaled as `rope.kind` says."""
    base = 1.0 / (rope.theta ** (np.arange(0, d_head, 2, dtype=np.float64) / d_head))
    if rope.kind == "default":
        return base
    if rope.kind == "linear":  # every position divided by factor: all frequencies slowed alike
        return base / rope.factor
    if rope.kind == "factors":  # llama.cpp's rope_freqs tensor: the llama3 scaling, precomputed
        return base / np.asarray(rope.freq_divisors, dtype=np.float64)
    if rope.kind == "llama3":  # slow only the low frequencies; blend those in between
        low_wavelen = rope.original_max_positions / rope.low_freq_factor
        high_wavelen = rope.original_max_positions / rope.high_freq_factor
        wavelen = 2 * math.pi / base
        scaled = np.where(wavelen > low_wavelen, base / rope.factor, base)
        smooth = ((rope.original_max_positions / wavelen - rope.low_freq_factor)
                  / (rope.high_freq_factor - rope.low_freq_factor))
        blended = (1 - smooth) * scaled / rope.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        return np.where(medium, blended, scaled)
    if rope.kind == "yarn":  # keep the fast frequencies, divide the slow ones, ramp in between
        def dim_at(rotations):  # the dimension that turns `rotations` times over the original context
            return (d_head * math.log(rope.original_max_positions / (rotations * 2 * math.pi))
                    / (2 * math.log(rope.theta)))
        low, high = dim_at(rope.beta_fast), dim_at(rope.beta_slow)
        if rope.truncate:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, d_head - 1)
        if low == high:
            high += 0.001  # as transformers: no division by zero
        ramp = np.clip((np.arange(d_head // 2, dtype=np.float64) - low) / (high - low), 0, 1)
        return base / rope.factor * ramp + base * (1 - ramp)  # [d_head / 2]
    raise ValueError(f"unknown RoPE kind {rope.kind!r}")


@functools.lru_cache(maxsize=16)
def _kept_inv_freq(rope: Rope, d_head: int) -> np.ndarray:
    """inv_freq, read-only, kept for a Rope (frozen: the same values every time it is asked)."""
    out = inv_freq(rope, d_head)
    out.flags.writeable = False
    return out


def _angles(positions: np.ndarray, d_head: int, rope: Rope) -> np.ndarray:  # [T] -> [T, d_head]
    """Every position's angles, in float32, in the rotate-half layout (both halves alike): each one
    float32(position x frequency), whatever else is computed beside it."""
    freqs = np.outer(positions.astype(np.float64), _kept_inv_freq(rope, d_head)).astype(np.float32)
    return np.concatenate([freqs, freqs], axis=-1)


def _cos_sin(emb: np.ndarray, rope: Rope):  # angles [T, d_head] -> cos, sin [T, d_head]
    if rope.attention_factor != 1.0:  # yarn: both scaled, so every score grows by its square
        return (np.cos(emb) * np.float32(rope.attention_factor),
                np.sin(emb) * np.float32(rope.attention_factor))
    return np.cos(emb), np.sin(emb)


def rope_tables(positions: np.ndarray, d_head: int, rope: Rope):  # [T] -> cos, sin [T, d_head]
    """cos and sin of every position's angles, in the rotate-half layout (both halves alike)."""
    return _cos_sin(_angles(positions, d_head, rope), rope)


ANGLE_ROWS = 64  # positions a block of kept angles covers (rope_row)


@functools.lru_cache(maxsize=8)
def _angle_block(rope: Rope, d_head: int, block: int) -> np.ndarray:
    """The angles of positions block * ANGLE_ROWS .. + ANGLE_ROWS - 1 [ANGLE_ROWS, d_head],
    read-only (a pure function of its arguments)."""
    out = _angles(np.arange(block * ANGLE_ROWS, (block + 1) * ANGLE_ROWS), d_head, rope)
    out.flags.writeable = False
    return out


def rope_row(p: int, d_head: int, rope: Rope):  # -> cos, sin [1, d_head]
    """rope_tables of the one position p, the same bits: its angles are a row of a kept block
    (each angle is computed alone, so the block's row is the same numbers), its cos and sin
    computed as rope_tables computes them, on a [1, d_head] row. A generation step asks one new
    position each time."""
    i = p % ANGLE_ROWS
    return _cos_sin(_angle_block(rope, d_head, p // ANGLE_ROWS)[i:i + 1], rope)
