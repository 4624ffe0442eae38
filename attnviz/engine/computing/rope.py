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
    """inv_freq, read-only, kept for a Rope (frozen: the same values every time it is asked):
    a generation step's tables are of one new position each."""
    out = inv_freq(rope, d_head)
    out.flags.writeable = False
    return out


def rope_tables(positions: np.ndarray, d_head: int, rope: Rope):  # [T] -> cos, sin [T, d_head]
    """cos and sin of every position's angles, in the rotate-half layout (both halves alike)."""
    freqs = np.outer(positions.astype(np.float64), _kept_inv_freq(rope, d_head)).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [T, d_head]
    if rope.attention_factor != 1.0:  # yarn: both scaled, so every score grows by its square
        return (np.cos(emb) * np.float32(rope.attention_factor),
                np.sin(emb) * np.float32(rope.attention_factor))
    return np.cos(emb), np.sin(emb)
