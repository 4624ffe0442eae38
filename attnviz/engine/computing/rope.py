"""Rotary position frequencies: the base, and the scalings of them that configs name
(`rope_type` default, linear, llama3, yarn), as transformers' ROPE_INIT_FUNCTIONS compute them.

A `Rope` is what one layer's RoPE needs; a model with local and global layers (Gemma 3) has one
of each. Pure NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("default", "linear", "llama3", "yarn")


@dataclass(frozen=True)
class Rope:
    theta: float  # the base: inv_freq_i = theta^(-2i / d_head)
    kind: str = "default"  # one of KINDS
    factor: float = 1.0  # linear, llama3: how much longer the context is made
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    original_max_positions: int = 8192  # llama3: the context the model was trained on first
    freq_divisors: tuple[float, ...] = ()  # "factors": one divisor per frequency (a GGUF's rope_freqs)
    beta_fast: float = 32.0  # yarn: rotations over the original context above which a frequency is kept
    beta_slow: float = 1.0  # yarn: ... below which it is divided by factor (a ramp between the two)
    truncate: bool = True  # yarn: the ramp's ends rounded to whole dimensions
    attention_factor: float = 1.0  # yarn: cos and sin are multiplied by it (0.1 ln(factor) + 1)

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
        if self.kind == "yarn":
            return (f"{base}, yarn ÷ {self.factor:g} (original {self.original_max_positions:,}, "
                    f"beta {self.beta_fast:g}/{self.beta_slow:g}, attention x {self.attention_factor:.4g})")
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


def rope_tables(positions: np.ndarray, d_head: int, rope: Rope):  # [T] -> cos, sin [T, d_head]
    """cos and sin of every position's angles, in the rotate-half layout (both halves alike)."""
    freqs = np.outer(positions.astype(np.float64), inv_freq(rope, d_head)).astype(np.float32)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [T, d_head]
    if rope.attention_factor != 1.0:  # yarn: both scaled, so every score grows by its square
        return (np.cos(emb) * np.float32(rope.attention_factor),
                np.sin(emb) * np.float32(rope.attention_factor))
    return np.cos(emb), np.sin(emb)
