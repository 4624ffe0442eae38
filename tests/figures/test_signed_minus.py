"""A signed number the window shows (hovers, captions, figure texts) writes its minus as "−", as
every colour bar writes it (`−0.5000`, never `-0.5000`); the command line and files keep the ASCII
"-" a program reads back (numbers.plain_signed; tests/cli/test_patch_cli.py); 0 up to rounding
reads `+0.0000` either way."""

import numpy as np

from attnviz.figures import headmap, patching, why
from attnviz.figures.numbers import minus_signs, plain_signed, signed


def test_the_window_writes_the_minus_the_bars_write_and_files_the_ascii_one():
    assert signed(-0.5) == "\u22120.5000" and signed(0.25, 3) == "+0.250"
    assert plain_signed(-0.5) == "-0.5000" and float(plain_signed(-0.5)) == -0.5
    assert signed(-2.7e-7) == plain_signed(-2.7e-7) == "+0.0000"


def test_grouped_thousands_are_the_why_lists_way_and_keep_the_same_signs():
    """Why here?'s lists write a part with its thousands grouped through these same helpers."""
    assert signed(-1234.5, grouped=True) == why.signed(-1234.5) == "\u22121,234.5000"
    assert plain_signed(1234.5, 1, grouped=True) == "+1,234.5"
    assert signed(-2.7e-7, grouped=True) == why.signed(-2.7e-7) == "+0.0000"


def test_a_hover_writes_a_negative_value_with_the_bars_minus():
    hm = headmap.HeadMap("DLA", np.array([[-1.25, 0.5]]), "logit", None, ("MLP", np.array([-0.75])),
                         (("embed", -0.125),))
    assert headmap.readout(hm, ("head", 0, 0)) == "L0 H0: \u22121.2500 logit"
    assert headmap.readout(hm, ("column", 0)) == "L0 MLP: \u22120.7500 logit"
    effect = np.ones((2, 3))
    effect[1, 2] = -0.5
    view = patching.PatchView("m", "resid", "denoise", effect, ("a", "b", "c"), ("a", "d", "c"), 2, 5, 6,
                              "x", "y", 1.5, -0.5)
    assert patching.readout(view, 1, 2).endswith("effect \u22120.5000")
    assert "clean +1.5000, corrupted \u22120.5000" in view.metric_line()


def test_a_number_python_writes_reads_with_the_window_minus_mantissa_and_exponent_alike():
    assert minus_signs(f"{-1.033e-05:.4g}") == "\u22121.033e\u221205"
    assert minus_signs(f"{-2.745:.3f}") == "\u22122.745" and minus_signs(f"{0.5:.2f}") == "0.50"
