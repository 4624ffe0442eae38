"""The cells under a head map (DLA's embed and bias) stay inside the picture at any width the map
is shown at: each names its number where the row has room, else its name alone (the hover gives
the number), and every painted text lies within the picture."""

import numpy as np
import pytest

from attnviz.figures import headmap
from attnviz.figures.numbers import signed
from windows import painted_texts


@pytest.mark.parametrize("width", [160, 200, 260, 600])
def test_the_bottom_row_fits_the_picture_and_names_its_numbers_where_there_is_room(qapp, monkeypatch, width):
    hm = headmap.HeadMap("DLA", np.linspace(-1, 1, 30 * 9).reshape(30, 9), "logit",
                         column=("MLP", np.zeros(30)), extras=(("embed", -12.345), ("bias", 0.5)))
    lay = headmap.layout(hm, width, 700)
    assert lay.extra_rects and all(r.left() >= 0 and r.right() <= lay.width for r in lay.extra_rects)
    painted = painted_texts(hm, lay, monkeypatch)
    with_numbers = [f"embed {signed(-12.345, 3)}", f"bias {signed(0.5, 3)}"]
    if width >= 600:
        assert all(t in painted for t in with_numbers), painted
    if width <= 200:  # (no room for "embed −12.345" and "bias +0.500" side by side)
        assert "embed" in painted and "bias" in painted and not any(t in painted for t in with_numbers)
