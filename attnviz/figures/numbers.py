"""Numbers as the hovers, lists, captions and command-line tables write them."""

from __future__ import annotations


def signed(value: float, decimals: int = 4) -> str:
    """`+0.1234`, `-0.1234`: a value with its sign, and `+0.0000` for one that rounds to zero (a part
    that is 0 up to float rounding, -2.7e-7, never reads `-0.0000`)."""
    text = f"{float(value):+.{decimals}f}"
    return "+" + text[1:] if text[0] == "-" and float(text) == 0 else text
