"""Numbers as the hovers, lists, captions and command-line tables write them."""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable
from decimal import Decimal


def plain_signed(value: float, decimals: int = 4, grouped: bool = False) -> str:
    """`+0.1234`, `-0.1234`: a value with its sign as the command line and files write it (an ASCII
    "-", which a program reads back), and `+0.0000` for one that rounds to zero (a part that is 0 up
    to float rounding, -2.7e-7, never reads `-0.0000`); grouped puts in thousands separators
    (`+1,234.5678`), as a list in the window writes a large part."""
    text = f"{float(value):+{',' if grouped else ''}.{decimals}f}"
    return "+" + text[1:] if text[0] == "-" and float(text.replace(",", "")) == 0 else text


def minus_signs(text: str) -> str:
    """A number as Python writes it (`-2.745`, `-1.03e-05`) with every minus "−", as the window
    writes them."""
    return text.replace("-", "\u2212")


def signed(value: float, decimals: int = 4, grouped: bool = False) -> str:
    """plain_signed as the window and its figures write it, the minus as "−" as every colour bar
    writes it: `+0.1234`, `−0.1234`, `+0.0000`."""
    return minus_signs(plain_signed(value, decimals, grouped))


def bar_end(value: float) -> str:
    """An end of a colour bar about 0 (A − B): `+0.447`, `−0.447`, its sign always written, the
    minus as "−": 3 significant digits below 1000, as `.3g` writes them (`+0.0002`, `+1`,
    `−0.00000123`), and from 1000 on the whole number (`+1234`: `.3g`'s `+1.23e+03` is harder to
    read beside a bar, and a rounded `+1230` would read as exact); a magnitude that fixed point
    would write in over FIXED_MAX characters with an exponent (`+1e+300`, `−1.23e−09`)."""
    v = float(value)
    return "0" if v == 0 else ("\u2212" if v < 0 else "+") + _significant(abs(v), 3)


def plain_number(value: float) -> str:
    """A number in a caption, a legend or a hover: 3 significant digits below 1000 (`0.447`, `12.3`,
    `0.0000123`), the whole number from 1000 on (`1234`, where `.3g` writes `1.23e+03`), with an
    exponent only where fixed point takes over FIXED_MAX characters (`1e+300`); the minus "−"."""
    v = float(value)
    return _significant(v, 3) if math.isfinite(v) else minus_signs(f"{v:g}")


def score_text(value: float, decimals: int = 3) -> str:
    """A score from 0 to 1 (a composition score) to `decimals` places, and one that rounds to 0
    there as `<0.001`, never `0.000`: computed in float32, a score of exactly 0 comes out a little
    above it (the textbook model's 0 reads 1.1e-6), so neither 0 nor its digits would read right."""
    text = f"{float(value):.{decimals}f}"
    return f"<{10.0 ** -decimals:.{decimals}f}" if float(text) == 0 else text


CROWD = 0.12  # of a bar's span: a round step this near an end is not written (the end is)
NEAR = 0.005  # of a bar's span: an end is written at most this far from the value it stands for
MAX_DECIMALS = 12  # a weight bar needing more in fixed point is written with exponents
FIXED_MAX = 10  # characters (the sign aside) a label may take in fixed point; a longer one is
# written with an exponent where that is shorter (`1e+300`, not 301 digits), and so is its bar
EXP_DIGITS = 17  # significant digits past which a float's exponent form writes no more


def _round_step(span: float, n: int) -> float | None:
    """The smallest of 1, 2, 2.5, 5 x 10^k that cuts `span` into at most about n steps (None for a
    span too small for a float to step through)."""
    if span / n < sys.float_info.min:
        return None
    mag = 10.0 ** math.floor(math.log10(span / n))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= span / n * (1 - 1e-9))


def _fixed(v: float, decimals: int) -> str:
    """`v` in fixed point, the minus as "−", and a value that rounds to 0 as 0 (not `−0.00`)."""
    text = f"{v:.{max(0, decimals)}f}"
    if text[0] == "-":
        return text[1:] if float(text) == 0 else "\u2212" + text[1:]
    return text


def _exponent(v: float, decimals: int) -> str:
    """`v` to the nearest 10^-decimals (decimals may be below 0) with an exponent, as Python's `e`
    writes it less the mantissa's trailing zeros: `2.5e+299`, `1e+300`, `5e−07` (every minus "−");
    0 as `0`."""
    if v == 0:
        return "0"
    mantissa_decimals = min(EXP_DIGITS, max(0, math.floor(math.log10(abs(v))) + decimals))
    mantissa, power = f"{v:.{mantissa_decimals}e}".split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{power}".replace("-", "\u2212")


def _long(texts) -> int:
    """The most characters of any of `texts`, its sign aside."""
    return max((len(t.lstrip("+\u2212")) for t in texts), default=0)


def _shorter(fixed: str, exponent: str) -> str:
    """A value's fixed-point text, or its exponent form where fixed point takes over FIXED_MAX
    characters and the exponent fewer."""
    return exponent if _long([fixed]) > FIXED_MAX and _long([exponent]) < _long([fixed]) else fixed


def _significant(v: float, digits: int) -> str:
    """`v` to `digits` significant digits, trailing zeros dropped (a digit rounded up, 0.9996 ->
    1.000, reads 1), the minus as "−": in fixed point, or with an exponent where fixed point takes
    over FIXED_MAX characters and the exponent fewer (`1e+300`, `4.94e−324`)."""
    if v == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(v)))
    text = f"{abs(v):.{max(0, decimals)}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return _shorter(("\u2212" if v < 0 else "") + text, _exponent(v, decimals))


def _value(text: str) -> float:
    return float(text.replace("\u2212", "-"))


Write = Callable[[float], str]  # how one bar writes any value on it


def _ends_only(lo: float, hi: float) -> tuple[list[tuple[float, str]], Write]:
    """A bar's two ends, each within NEAR of the span of its value and the two apart, and how the
    bar writes any other value: in fixed point to the fewest decimals that do, every label to the
    same decimals as a wider bar writes them (`1.00000000000001 1.00000000000000 0.99999999999999`),
    or, where that is longer, in the fewest significant digits (3 or more) that do (`1e−310`)."""
    span = hi - lo

    def reads_right(write: Write) -> bool:
        texts = (write(lo), write(hi))
        return texts[0] != texts[1] and all(abs(_value(t) - v) <= NEAR * span for t, v in zip(texts, (lo, hi)))

    for digits in range(3, 18):
        write = functools.partial(_significant, digits=digits)
        if reads_right(write):
            break
    fixed = next((w for d in range(2 * EXP_DIGITS) if reads_right(w := functools.partial(_fixed, decimals=d))), None)
    if fixed is not None and _long((fixed(lo), fixed(hi))) <= _long((write(lo), write(hi))):
        write = fixed
    return [(lo, write(lo)), (hi, write(hi))], write


def _weights_writer(lo: float, hi: float, steps: list[float], decimals: int) -> Write | None:
    """How a bar not about 0 writes every label, in one format: to the step's `decimals` (below 0
    for a step of 10 or more), or more where an end would read over NEAR of the span off its value
    or as the label beside it; in fixed point, or with exponents where fixed point takes over
    FIXED_MAX characters (the shorter of the two where both do); None where neither writes the
    ends right in FIXED_MAX characters and only one writes them right at all."""
    span, labels = hi - lo, [lo, hi, *steps]

    def reads_right(write: Write) -> bool:
        return all(abs(_value(write(end)) - end) <= NEAR * span and write(end) != write(beside)
                   for end, beside in ((lo, steps[0] if steps else hi), (hi, steps[-1] if steps else lo)))

    found = []  # (longest label, writer): fixed point first
    for form, first, last in ((_fixed, max(0, decimals), MAX_DECIMALS),
                              (_exponent, decimals, decimals + EXP_DIGITS)):
        write = next((w for d in range(first, last + 1)
                      if reads_right(w := functools.partial(form, decimals=d))), None)
        if write is not None:
            found.append((_long(write(v) for v in labels), write))
    short = [write for longest, write in found if longest <= FIXED_MAX]
    if short or len(found) < 2:  # (one found alone and long: the ends only, in significant digits)
        return short[0] if short else None
    return min(found, key=lambda f: f[0])[1]


Labels = list[tuple[float, str]]  # (value, text) each


def _bar_format(lo: float, hi: float, n: int) -> tuple[Labels, Labels, Write]:
    """bar_ticks' (the two ends, the round steps between), and how the bar writes any other value
    (bar_text), for a finite bar."""
    span = hi - lo
    if not span > 0:
        return [(lo, _significant(lo, 3))], [], functools.partial(_significant, digits=3)
    about_zero = lo < 0 < hi
    step = _round_step(span, n)
    if step is None:
        if about_zero:
            return [(lo, bar_end(lo)), (hi, bar_end(hi))], [], bar_end
        ends, write = _ends_only(lo, hi)
        return ends, [], write
    exp = math.floor(math.log10(step) + 1e-9)
    decimals = -exp + (1 if round(step / 10.0 ** exp, 6) == 2.5 else 0)  # 0.25 needs 2
    # (a set: on a bar a few floats wide, k * step for several k rounds to one float)
    values = sorted({k * step for k in range(math.ceil(lo / step - 1e-9), math.floor(hi / step + 1e-9) + 1)})
    steps = [v for v in values if min(v - lo, hi - v) >= CROWD * span]
    if about_zero:
        ends = [(lo, bar_end(lo)), (hi, bar_end(hi))]
        exponent_side = {v > 0: "e" in t for v, t in ends}  # (the sides, each with its end's form)

        def signed_step(v: float) -> str:  # (k * step: k = 0 gives exactly 0.0)
            fixed, exponent = _fixed(abs(v), decimals), _exponent(abs(v), decimals)
            text = exponent if exponent_side[v > 0] else _shorter(fixed, exponent)
            return "0" if v == 0 else ("+" if v > 0 else "\u2212") + text
        return ends, _apart(ends, [(v, signed_step(v)) for v in steps]), bar_end
    write = _weights_writer(lo, hi, steps, decimals)
    if write is None:
        ends, write = _ends_only(lo, hi)
        return ends, [], write
    ends = [(lo, write(lo)), (hi, write(hi))]
    return ends, _apart(ends, [(v, write(v)) for v in steps]), write


def _apart(ends: Labels, steps: Labels) -> Labels:
    """`steps` less each written as an end or as a step before it: on a bar a few floats wide two
    floats can round to one text, and a label that cannot be told apart is left out."""
    seen, kept = {t for _, t in ends}, []
    for v, t in steps:
        if t not in seen:
            seen.add(t)
            kept.append((v, t))
    return kept


def bar_ticks(lo: float, hi: float, n: int = 4) -> tuple[list[tuple[float, str]], list[tuple[float, str]]]:
    """The labels of a colour bar from lo to hi, as the window's bars and the exported figures
    write them: (the two ends, the round steps between), each (value, text); none for a bar
    whose span is not a finite number.

    The steps are multiples of 1, 2, 2.5 or 5 x 10^k, about n of them; one nearer an end than
    CROWD of the span is left out, the end is written instead. A bar about 0 (A − B: lo < 0 < hi)
    writes its ends as bar_end does (`+0.447`, `−0.447`) and its steps with their sign to the
    step's decimals, each step with an exponent where the end on its side has one (or fixed point
    would take over FIXED_MAX characters), else in fixed point: `+2 +1.5 +1.0 +0.5 −1e−09`. Any other
    bar (weights: 0 to the largest) writes every label in one format, as many decimals as the
    step needs, or more where an end would read over NEAR of the span off its value (0.37, not
    0.4) or as the step below it (0.35 over 0.30): `0.00 0.25 0.50 0.75 1.00` for 0 to 0.9996.
    A bar whose labels fixed point would write in over FIXED_MAX characters writes them all with
    exponents (`0 2.5e+299 5e+299 7.5e+299 1e+300` for 0 to 1e300, `0 ... 1.02e−11`), and one
    that neither writes right in FIXED_MAX characters writes only its ends: in fixed point to
    the fewest decimals that write them right, as bar_text then writes its middle, or where that
    is longer in significant digits. Every minus is "−"."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo)):
        return [], []
    return _bar_format(lo, hi, n)[:2]


def bar_text(lo: float, hi: float, value: float, n: int = 4) -> str:
    """`value` written as bar_ticks writes the labels of a bar from lo to hi: a bar's middle, say,
    where it is not one of its steps. On a bar about 0 as its ends (bar_end: `+1` in the middle of
    −4 to +6, `0` for 0), on any other in the format and digits of its round steps (`1.0000`
    between `1.0002` and `0.9998`)."""
    lo, hi = float(lo), float(hi)
    if not (math.isfinite(lo) and math.isfinite(hi) and math.isfinite(hi - lo)):
        return _significant(float(value), 3)
    return _bar_format(lo, hi, n)[2](float(value))


def bar_about(middle: float, lim: float, n: int = 4) -> tuple[str, str, str]:
    """The (top, middle, bottom) labels of a bar from middle − lim to middle + lim, as bar_ticks
    writes its ends and bar_text its middle, each end read against the exact middle ± lim: where
    the float nearest that is over half a unit of the label's last digit from it (a bar about 1
    only a few floats wide), the end is written from the exact value to the same decimals (left
    out where it has an exponent). A limit of 0, or one too small for the floats about the middle
    to tell its ends from it: the middle only."""
    lo, hi = middle - lim, middle + lim
    ends, text = dict(bar_ticks(lo, hi, n)[0]), bar_text(lo, hi, middle, n)
    if lim == 0 or not ends:
        return ("", text, "") if lim == 0 else (ends.get(hi, ""), text, ends.get(lo, ""))
    exact_mid, exact_lim = Decimal(middle), Decimal(lim)
    top, bottom = _exactly(ends.get(hi, ""), exact_mid + exact_lim), _exactly(ends.get(lo, ""), exact_mid - exact_lim)
    return ("" if top == text else top), text, ("" if bottom == text else bottom)


def _exactly(text: str, value: Decimal) -> str:
    """`text` where it reads `value` within half a unit of its last digit, else `value` in fixed point
    to text's decimals (its "+" kept), or "" where text has an exponent."""
    if not text:
        return text
    mantissa, _, power = text.replace("\u2212", "-").lstrip("+-").partition("e")
    decimals = len(mantissa.partition(".")[2])
    if abs(Decimal(text.replace("\u2212", "-").lstrip("+")) - value) <= Decimal(1).scaleb(int(power or 0) - decimals) / 2:
        return text
    return "" if power else ("+" if text[0] == "+" and value > 0 else "") + _fixed(value, decimals)
