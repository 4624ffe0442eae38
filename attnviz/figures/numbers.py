"""Numbers as the hovers, lists, captions and command-line tables write them."""

from __future__ import annotations

import math


def signed(value: float, decimals: int = 4) -> str:
    """`+0.1234`, `-0.1234`: a value with its sign, and `+0.0000` for one that rounds to zero (a part
    that is 0 up to float rounding, -2.7e-7, never reads `-0.0000`)."""
    text = f"{float(value):+.{decimals}f}"
    return "+" + text[1:] if text[0] == "-" and float(text) == 0 else text


def bar_end(value: float) -> str:
    """An end of a colour bar about 0 (A − B): `+0.447`, `−0.447`, its sign always written, the
    minus as "−", in fixed point, never an exponent: 3 significant digits below 1000, as `.3g`
    writes them (`+0.0002`, `+1`, `−0.00000123`, never `-1.23e-06`), and from 1000 on the whole
    number (`+1234`: `.3g`'s `+1.23e+03` is harder to read beside a bar, and a rounded `+1230`
    would read as exact)."""
    v = float(value)
    if v == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(abs(v))))
    text = f"{abs(v):.{decimals}f}"
    if float(text) >= 10 ** (3 - decimals):  # rounded up a digit (0.9996 -> 1.000): one decimal less
        text = f"{abs(v):.{max(0, decimals - 1)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return ("\u2212" if v < 0 else "+") + text
