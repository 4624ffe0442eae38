"""Numbers as the hovers, lists, captions and command-line tables write them."""

from __future__ import annotations

import math
import sys


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
    return "0" if v == 0 else ("\u2212" if v < 0 else "+") + _significant(abs(v), 3)


CROWD = 0.12  # of a bar's span: a round step this near an end is not written (the end is)
NEAR = 0.005  # of a bar's span: an end is written at most this far from the value it stands for
MAX_DECIMALS = 12  # a weight bar needing more is written as its ends only, in significant digits


def _round_step(span: float, n: int) -> float | None:
    """The smallest of 1, 2, 2.5, 5 x 10^k that cuts `span` into at most about n steps (None for a
    span too small for a float to step through)."""
    if span / n < sys.float_info.min:
        return None
    mag = 10.0 ** math.floor(math.log10(span / n))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= span / n * (1 - 1e-9))


def _fixed(v: float, decimals: int) -> str:
    """`v` in fixed point, the minus as "−", and a value that rounds to 0 as 0 (not `−0.00`)."""
    text = f"{v:.{decimals}f}"
    if text[0] == "-":
        return text[1:] if float(text) == 0 else "\u2212" + text[1:]
    return text


def _significant(v: float, digits: int) -> str:
    """`v` in fixed point to `digits` significant digits, trailing zeros dropped (a digit rounded up,
    0.9996 -> 1.000, reads 1), the minus as "−"."""
    if v == 0:
        return "0"
    text = f"{abs(v):.{max(0, digits - 1 - math.floor(math.log10(abs(v))))}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return ("\u2212" if v < 0 else "") + text


def _value(text: str) -> float:
    return float(text.replace("\u2212", "-"))


def _ends_only(lo: float, hi: float) -> list[tuple[float, str]]:
    """A bar's two ends in the fewest significant digits (3 or more) that write each within NEAR
    of the span of its value and the two apart."""
    span = hi - lo
    for digits in range(3, 18):
        texts = (_significant(lo, digits), _significant(hi, digits))
        if texts[0] != texts[1] and all(abs(_value(t) - v) <= NEAR * span for t, v in zip(texts, (lo, hi))):
            break
    return [(lo, texts[0]), (hi, texts[1])]


def bar_ticks(lo: float, hi: float, n: int = 4) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """The labels of a colour bar from lo to hi, as the window's bars and the exported figures
    write them: (the two ends, the round steps between), each (value, text); none for a bar
    whose span is not a finite number.

    The steps are multiples of 1, 2, 2.5 or 5 x 10^k, about n of them; one nearer an end than
    CROWD of the span is left out, the end is written instead. A bar about 0 (A − B: lo < 0 < hi)
    writes its ends as bar_end does (`+0.447`, `−0.447`) and its steps with their sign. Any other
    bar (weights: 0 to the largest) writes every label in one format, as many decimals as the
    step needs, or more where an end would read over NEAR of the span off its value (0.37, not
    0.4) or as the step below it (0.35 over 0.30): `0.00 0.25 0.50 0.75 1.00` for 0 to 0.9996;
    one that would need over MAX_DECIMALS decimals writes only its ends, in significant digits
    (`0` and `0.0000000000102`). Every minus is "−"."""
    lo, hi = float(lo), float(hi)
    span = hi - lo
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(span)):
        return [], []
    if not span > 0:
        return [(lo, _significant(lo, 3))], []
    about_zero = lo < 0 < hi
    step = _round_step(span, n)
    if step is None:
        return ([(lo, bar_end(lo)), (hi, bar_end(hi))] if about_zero else _ends_only(lo, hi)), []
    exp = math.floor(math.log10(step) + 1e-9)
    decimals = max(0, -exp + (1 if round(step / 10.0 ** exp, 6) == 2.5 else 0))  # 0.25 needs 2
    values = [k * step for k in range(math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) + 1)]
    steps = [v for v in values if min(v - lo, hi - v) >= CROWD * span]
    if about_zero:
        def text(v: float) -> str:
            return "0" if round(v, decimals) == 0 else f"{v:+.{decimals}f}".replace("-", "\u2212")
        return [(lo, bar_end(lo)), (hi, bar_end(hi))], [(v, text(v)) for v in steps]
    for end, beside in ((lo, steps[0] if steps else hi), (hi, steps[-1] if steps else lo)):
        while decimals <= MAX_DECIMALS and (abs(float(f"{end:.{decimals}f}") - end) > NEAR * span
                                            or f"{end:.{decimals}f}" == f"{beside:.{decimals}f}"):
            decimals += 1
    if decimals > MAX_DECIMALS:
        return _ends_only(lo, hi), []
    return [(lo, _fixed(lo, decimals)), (hi, _fixed(hi, decimals))], [(v, _fixed(v, decimals)) for v in steps]
