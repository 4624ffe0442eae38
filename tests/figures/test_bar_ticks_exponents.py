"""A colour bar of very large or very small weights (0 to 1e300, 0 to 1e-20) writes its labels
with exponents (`2.5e+299`, `1e+300`) instead of hundreds of digits in fixed point, the same way
on every bar (figures.numbers.bar_ticks: the grid, the focus view, Corpus, the exports; bar_end:
Compare's A − B ends); a bar that fixed point writes in FIXED_MAX characters is written in fixed
point."""

import pytest

from attnviz.figures.numbers import FIXED_MAX, NEAR, bar_end, bar_ticks


def _value(text: str) -> float:
    return float(text.replace("\u2212", "-"))


def _labels(lo: float, hi: float) -> list[str]:
    ends, steps = bar_ticks(lo, hi)
    return [t for _, t in sorted(ends + steps)]


@pytest.mark.parametrize("lo, hi, want", [
    (0.0, 1e300, ["0", "2.5e+299", "5e+299", "7.5e+299", "1e+300"]),
    (0.0, 1e-300, ["0", "2.5e\u2212301", "5e\u2212301", "7.5e\u2212301", "1e\u2212300"]),
    (0.0, 1.02e-11, ["0", "5e\u221212", "1.02e\u221211"]),
    (0.0, 1.23456e10, ["0", "5e+09", "1e+10", "1.23e+10"]),
    (-1e300, 1e300, ["\u22121e+300", "\u22125e+299", "0", "+5e+299", "+1e+300"]),
    (-1.2e-8, 1.3e-8, ["\u22121.2e\u221208", "0", "+1e\u221208", "+1.3e\u221208"]),
])
def test_a_huge_or_tiny_bar_writes_exponents(lo, hi, want):
    assert _labels(lo, hi) == want


@pytest.mark.parametrize("power", range(-307, 308, 7))
def test_every_label_is_short_and_right_at_any_magnitude(power):
    hi = 0.87 * 10.0 ** power
    ends, steps = bar_ticks(0.0, hi)
    texts = [t for _, t in ends + steps]
    assert len(set(texts)) == len(texts) >= 2, texts
    assert all(len(t) <= FIXED_MAX for t in texts), texts
    for v, t in ends + steps:
        assert abs(_value(t) - v) <= NEAR * hi, (v, t)


@pytest.mark.parametrize("hi", [1e-6, 3.7e-4, 0.87, 1.37, 12345.6, 1e6, 1.2e9])
def test_a_bar_fixed_point_writes_short_keeps_fixed_point(hi):
    assert not any("e" in t for t in _labels(0.0, hi))


@pytest.mark.parametrize("value, text", [
    (1e300, "+1e+300"), (-1.234e-9, "\u22121.23e\u221209"), (-1.23e-6, "\u22120.00000123"),
    (98765.4, "+98765"),
])
def test_a_bar_end_about_zero_follows_the_same_rule(value, text):
    assert bar_end(value) == text
