"""Rotary position frequencies: the base, and the scalings of them that configs name
(`rope_type` default, linear, llama3), as transformers' ROPE_INIT_FUNCTIONS compute them.

A `Rope` is what one layer's RoPE needs; a model with local and global layers (Gemma 3) has one
of each. Pure NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("default", "linear", "llama3")


@dataclass(frozen=True)
class Rope:
    theta: float  # the base: inv_freq_i = theta^(-2i / d_head)
    kind: str = "default"  # one of KINDS
    factor: float = 1.0  # linear, llama3: how much longer the context is made
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_positions: int = 8192  # llama3: the context the model was trained on first
    freq_divisors: tuple[float, ...] = ()  # "factors": one divisor per frequency (a GGUF's rope_freqs)

    def describe(self) -> str:
        """One line: 'base 10,000' or 'base 1,000,000, linear ÷ 8'."""
        base = f"base {self.theta:,.0f}"
        if self.kind == "linear":
            return f"{base}, linear ÷ {self.factor:g}"
        if self.kind == "factors":
            return f"{base}, per-frequency factors (rope_freqs)"
        if self.kind == "llama3":
            return (f"{base}, llama3 ÷ {self.factor:g} (low {self.low_freq_factor:g}, high "
                    f"{self.high_freq_factor:g}, original {self.original_max_positions:,})")
        return base


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
    raise ValueError(f"unknown RoPE kind {rope.kind!r}")


def rope_tables(positions: np.ndarray, d_head: int, rope: Rope):  # [T] -> cos, sin [T, d_head]
    """cos and sin of every position's angles, in the rotate-half layout (both halves alike)."""
    freqs = np.outer(positions.astype(np.float64), inv_freq(rope, d_head)).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [T, d_head]
    return np.cos(emb), np.sin(emb)
