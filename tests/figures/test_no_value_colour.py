"""A cell with no value (a hidden first key, a row with no weight left under Hide first token) has
one colour per colormap, which no colour of that map comes near, nor of the diverging map that A − B
shows in the same views: so it cannot be read as 0 or as the top. (Each view painted it its own
colour, the window's background, white, dark green: with CET-L1, grey from black to white, those
read as weights.)"""

import numpy as np
import pytest

from attnviz.figures.compare import weight_rgb
from attnviz.figures.data import COLORMAPS
from attnviz.figures.style import (
    colour_distance, diverging_colors, heat_table, lab, no_value_colour, no_value_word, signed_table,
)

FAR = 40.0  # CIELAB ΔE: colours this far apart are plainly different


@pytest.mark.parametrize("name", COLORMAPS)
def test_the_no_value_colour_is_far_from_every_colour_the_map_paints(name):
    c = no_value_colour(name)
    tables = [heat_table(name)[1:, :3], weight_rgb(np.linspace(0, 1, 256), name), signed_table()[1:, :3],
              diverging_colors(256)]  # (the grid's, the Compare tiles', A − B's)
    for table in tables:
        assert colour_distance(c, table) >= FAR, (name, c)


def test_the_greyscale_map_s_no_value_is_neither_black_nor_white_nor_grey():
    c = no_value_colour("CET-L1")
    for grey in ((0, 0, 0), (255, 255, 255), (128, 128, 128), (32, 33, 36)):
        assert colour_distance(c, np.array([grey])) >= FAR


def test_the_colour_s_word_names_it():
    names = {"magenta": (255, 0, 255), "green": (0, 255, 0), "blue": (0, 0, 255)}
    for name in COLORMAPS:
        assert names[no_value_word(name)] == no_value_colour(name)


def test_lab_of_known_colours():
    np.testing.assert_allclose(lab([255, 255, 255]), [100, 0, 0], atol=0.01)
    np.testing.assert_allclose(lab([0, 0, 0]), [0, 0, 0], atol=0.01)
    np.testing.assert_allclose(lab([255, 0, 0]), [53.24, 80.09, 67.20], atol=0.05)
