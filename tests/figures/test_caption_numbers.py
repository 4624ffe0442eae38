"""The numbers in the head maps' captions and the heatmap figure's notes read as a person expects:
3 significant digits below 1000, the whole number from 1000 on (never `1.23e+03`), fixed point for
small ordinary sizes (`0.0000123`, never `1.23e-05`), an exponent only for a magnitude that fixed
point writes in over FIXED_MAX characters."""

import numpy as np
import pytest

from attnviz.figures import headmap
from attnviz.figures.numbers import plain_number


@pytest.mark.parametrize("value, text", [
    (0.4471, "0.447"), (1.0, "1"), (12.345, "12.3"), (999.4, "999"), (1234.4, "1234"),
    (123456.7, "123457"), (0.0000123, "0.0000123"), (0.0, "0"), (1e300, "1e+300"),
    (1.23e-11, "1.23e\u221211"), (-2.5, "\u22122.5"),
])
def test_a_number_reads_in_fixed_point_where_that_is_short(value, text):
    assert plain_number(value) == text


def test_a_head_maps_caption_writes_its_limits_without_exponents(qapp):
    values = np.array([[1234.4, -3.0], [0.5, 2.0]])
    signed = headmap.HeadMap("DLA", values, "logit", column=("MLP", np.array([5678.9, 1.0])))
    assert signed.scale_text() == "blue < 0 < red, \u00b11234 logit (MLP up to \u00b15679: clipped)"
    small = headmap.HeadMap("JSD", np.array([[0.0000123, 0.0]]), "bits", nonnegative=True)
    assert small.scale_text() == "white 0 to red 0.0000123 bits"
