"""An exported figure's colour-bar labels never overlap, however short the bar (an "all layers"
figure of 1 or 2 layers of 32 heads: a bar 14 to 44 pixels tall): its two ends are always written,
the lowest and the highest, and a round step only where its label clears every other (as the
window's bar leaves out its steps where they would crowd); on a tall bar every step is there."""

import pytest

from export_files import bar_label_spots


@pytest.mark.parametrize("n_layer, n_head, scope, width", [
    (1, 32, "all", 900), (2, 32, "all", 900), (1, 32, "all", 2400), (2, 32, "all", 300),
    (1, 4, "layer", 300), (1, 2, "head", 300), (1, 4, "layer", 900), (1, 2, "head", 900),
])
def test_the_bars_labels_clear_each_other(qapp, n_layer, n_head, scope, width):
    spots = sorted(bar_label_spots(0.87, n_layer, n_head, scope, width))  # top down
    texts = [t for _, _, t in spots]
    assert texts[0] == "0.87" and texts[-1] == "0.00", texts  # the ends, in their places
    assert texts == sorted(texts, key=float, reverse=True), texts
    for (y0, size, t0), (y1, _, t1) in zip(spots, spots[1:]):
        assert y1 - y0 >= size, f"{t0} at y {y0:.1f} and {t1} at y {y1:.1f}: {size:g} px labels overlap"


def test_a_tall_bar_writes_every_step(qapp):
    assert [t for _, _, t in sorted(bar_label_spots(0.87, 1, 2, "head", 900))] == [
        "0.87", "0.75", "0.50", "0.25", "0.00"]
