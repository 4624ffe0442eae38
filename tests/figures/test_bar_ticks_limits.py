"""A colour bar's labels are right over any finite span, however small or large, and of a bar on
either side of 0: each label stands at a value within the bar, the ends at its ends, written within
NEAR of the span of that value, no two alike, every minus "−"; a bar whose span is not a finite
number gets no labels (it is not drawn with numbers it cannot have). (Where fixed point would be
long, exponents: tests/figures/test_bar_ticks_exponents.py.)"""

import math

import pytest

from attnviz.figures.numbers import NEAR, bar_ticks


def _value(text: str) -> float:
    return float(text.replace("\u2212", "-"))


@pytest.mark.parametrize("lo, hi", [
    (0.0, 0.9996), (0.0, 1.02e-11), (0.0, 1.015e-11), (0.0, 3.7e-13), (0.0, 1e-15), (0.0, 1e-310),
    (0.0, 5e-324), (-1.0, 0.0), (-0.37, -0.0001), (-2.05e-12, -1e-12), (-1e-13, 1e-13),
    (-5e-324, 5e-324), (1.0, 1.0 + 1e-13), (0.0, 0.2004), (0.0, 0.02015), (0.0, 12345.6),
])
def test_every_label_is_right_whatever_the_span(lo, hi):
    ends, steps = bar_ticks(lo, hi)
    assert [v for v, _ in ends] == [lo, hi]
    texts = [t for _, t in ends + steps]
    assert len(set(texts)) == len(texts), texts
    assert not any("-" in t for t in texts), texts  # the minus "−"
    for v, t in ends + steps:
        assert lo <= v <= hi, (v, t)
        assert abs(_value(t) - v) <= NEAR * (hi - lo), (v, t)


@pytest.mark.parametrize("lo, hi", [
    (0.0, math.inf), (0.0, math.nan), (-math.inf, 0.0), (-1e308, 1e308), (math.nan, math.nan),
])
def test_a_bar_whose_span_is_not_finite_has_no_labels(lo, hi):
    assert bar_ticks(lo, hi) == ([], [])
