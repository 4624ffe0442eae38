"""The exported heatmap figure's colour-bar ticks are written in one format: the top of the bar
(the largest weight shown) with as many decimals as the ticks below it ("1.00" over "0.75", not
"1"), and with one more decimal for every tick where it would otherwise read as the tick below it
or as a step's rounding of its value (0.37, not 0.4). The top is always written, and a round
step crowding it is not (0.63 over 0.40, not 0.6): as the window's colour bar writes them
(figures.numbers.bar_ticks, tests/ui/test_bar_labels_as_exported.py)."""

import pytest

from export_files import bar_labels


@pytest.mark.parametrize("top, want", [
    (0.9996, ["0.00", "0.25", "0.50", "0.75", "1.00"]),  # (the top not "1")
    (0.87, ["0.00", "0.25", "0.50", "0.75", "0.87"]),
    (0.35, ["0.00", "0.10", "0.20", "0.30", "0.35"]),  # (one decimal would write 0.3 twice)
    (0.63, ["0.00", "0.20", "0.40", "0.63"]),  # (the top, not the step 0.6 just under it)
    (0.37, ["0.00", "0.10", "0.20", "0.30", "0.37"]),  # (one decimal rounded the top up to 0.4)
    (0.46, ["0.00", "0.20", "0.40", "0.46"]),
    (0.77, ["0.00", "0.20", "0.40", "0.60", "0.77"]),
    (1.37, ["0.00", "0.50", "1.00", "1.37"]),
    (0.046, ["0.000", "0.020", "0.040", "0.046"]),
])
def test_the_colour_bar_ticks_share_one_format(qapp, top, want):
    labels = bar_labels(top)
    assert sorted(labels, key=float) == want
    assert len({len(t.split(".")[-1]) for t in labels}) == 1
