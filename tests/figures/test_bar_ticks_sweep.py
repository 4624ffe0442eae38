"""Every label a colour bar writes (figures.numbers.bar_ticks, bar_text) reads the value at its tick
to the digits it shows, over a sweep of magnitudes and spans, positive, negative and about 0, down
to bars only a few floats wide (1e6 to 1e6 + 0.003, 1.5e13 to 1.5e13 + 0.004): each label parses
back, in exact decimals, to its tick's value within half a unit of its last digit, no two ticks
stand at one value, and no two labels read alike (a step that cannot be told apart from its
neighbours is left out)."""

from __future__ import annotations

import math
import random
from decimal import Decimal

import pytest

from attnviz.figures.numbers import bar_text, bar_ticks


def _number(text: str) -> Decimal:
    return Decimal(text.replace("\u2212", "-").lstrip("+"))


def _half_unit(text: str) -> Decimal:
    """Half a unit of `text`'s last digit (`1.25e+03`: 5; `0.100`: 0.0005)."""
    mantissa, _, power = text.replace("\u2212", "-").lstrip("+-").partition("e")
    decimals = len(mantissa.partition(".")[2])
    return Decimal(1).scaleb(int(power or 0) - decimals) / 2


def _bars(seed: int, n: int) -> list[tuple[float, float]]:
    """n bars: each side of 0 and across it, magnitudes 1e-300 to 1e300, relative spans 1e-16 to 10."""
    rng, bars = random.Random(seed), []
    while len(bars) < n:
        base, rel, kind = 10.0 ** rng.uniform(-300, 300), 10.0 ** rng.uniform(-16.5, 1), rng.random()
        if kind < 0.4:
            lo, hi = base, base * (1 + rel)
        elif kind < 0.8:
            lo, hi = -base * (1 + rel), -base
        else:
            lo, hi = -base * rng.random(), base * rng.random()
        if hi > lo and math.isfinite(hi - lo):
            bars.append((lo, hi))
    return bars


FEW_FLOATS = [(1e6, 1e6 + 0.003), (1.5032613260103326e13, 1.503261326010333e13), (-1e15 - 0.5, -1e15),
              (7.064889695150872e87, 7.064889695150874e87), (1.0, 1.0 + 4.4e-16), (1e12, 1e12 + 0.3)]


@pytest.mark.parametrize("seed", range(4))
def test_every_label_reads_its_ticks_value(seed):
    for lo, hi in FEW_FLOATS + _bars(seed, 6000):
        ends, steps = bar_ticks(lo, hi)
        labels = ends + steps
        assert [v for v, _ in ends] == [lo, hi]
        assert len({v for v, _ in labels}) == len(labels), (lo, hi, labels)
        assert len({t for _, t in labels}) == len(labels), (lo, hi, labels)
        for v, t in labels:
            assert lo <= v <= hi, (lo, hi, v, t)
            assert abs(_number(t) - Decimal(v)) <= _half_unit(t), (lo, hi, v, t)
        mid = lo / 2 + hi / 2
        text = bar_text(lo, hi, mid)
        assert abs(_number(text) - Decimal(mid)) <= _half_unit(text), (lo, hi, mid, text)
