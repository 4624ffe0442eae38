"""The figures sample a colormap from pyqtgraph's own map file, without importing pyqtgraph (its
package import was 0.4 s of an image export): the table must be the one pyqtgraph's ColorMap gives,
byte for byte, for every map it ships."""

import subprocess
import sys

import numpy as np
import pytest

from attnviz.figures.data import COLORMAPS, ExportError
from attnviz.figures.style import colormap_colors, colormap_names


def test_every_shipped_map_matches_pyqtgraphs_lookup_table():
    import pyqtgraph as pg

    names = colormap_names()
    assert set(COLORMAPS) <= set(names) and len(names) > 50
    for name in names:
        cmap = pg.colormap.get(name, skipCache=True)
        for n in (255, 256, 7, 2):
            want = np.asarray(cmap.getLookupTable(0.0, 1.0, nPts=n), np.uint8)[:, :3]
            np.testing.assert_array_equal(colormap_colors(name, n), want, err_msg=f"{name} at {n} points")


@pytest.mark.parametrize("name", ["nope", "", "../maps/viridis", "viridis.csv"])
def test_an_unknown_name_is_refused_with_the_offered_maps(name):
    with pytest.raises(ExportError, match=r"unknown colormap .*try viridis, magma"):
        colormap_colors(name, 255)


def test_sampling_a_colormap_leaves_pyqtgraph_unimported():
    code = ("import sys\nfrom attnviz.figures.style import heat_table\nheat_table('magma')\n"
            "print('pyqtgraph' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
