"""At device pixel ratios of 2 and 1.5 (QT_SCALE_FACTOR on the offscreen platform, each in a Python
of its own, run once for the module: a running QApplication keeps its ratio) each hover names the
cell Qt paints on the device pixel under the pointer, and a click picks it: the pointer is moved
onto the device pixels of a picture, at positions between whole widget pixels as Qt delivers them
there, and the named cell's colour compared with the grabbed device pixel's.

- At 2: the grid's and the focus view's pooled pictures (every device pixel of some rows), the DLA
  view; a click on a block's last device row or column (the grid's Shift+click and right click,
  the focus view's left and right click) names the cell the hover names there. (QGraphicsView
  gives its scene the pointer rounded to a whole widget pixel: on every other device pixel the
  grid and the focus view read the one right of or below it; there a click read the next block.)
- At 2 and at 1.5: the Compare panel's tiles (pooled, A and A − B) and its token strip (every
  cell framed: a frame's pixels and those inside it name its token, no other pixel does), the
  Patching map of effects (pooled and not) (and its patterns at 2), each at an offset in its window
  that is not whole device pixels at 1.5, as in the app; at 1.5 the grid and the long view's tiles
  too, at such an offset. (At 1.5 the strip's, the map's, the grid's and the long view's hovers
  counted device pixels from the widget's own edge, which lies between two of the window's: a pixel
  near a cell's edge named its neighbour, or no cell on a frame's pixel. The long view's also read
  its picture as a pyqtgraph image is painted, not as QPainter.drawImage paints it.)"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHILD = REPO / "tests" / "device_pixels.py"  # (the checks, run by a Python of each ratio)
CHECKS = {"2": ["grid", "focus", "dla", "tiles", "strip", "patching", "patterns"],
          "1.5": ["tiles", "strip", "patching", "grid_in_window", "long_tiles"]}


@pytest.fixture(scope="module")
def shown(tmp_path_factory):
    """{ratio: {check: its numbers}}: one child Python a ratio, both run at once."""
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    runs = {ratio: subprocess.Popen([sys.executable, str(CHILD), *checks], cwd=tmp_path_factory.mktemp("hover"),
                                    env={**env, "QT_SCALE_FACTOR": ratio}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
            for ratio, checks in CHECKS.items()}
    out = {}
    try:
        for ratio, run in runs.items():
            stdout, stderr = run.communicate(timeout=600)
            assert run.returncode == 0, stderr
            out[ratio] = json.loads(stdout.strip().splitlines()[-1])
    finally:
        for run in runs.values():  # (the other one, where one failed)
            run.kill()
            run.wait()
    for ratio, checks in out.items():
        for name, got in checks.items():
            for one in got.values() if name == "patching" else [got]:
                assert one["dpr"] == one["image_dpr"] == float(ratio), (name, one)
    return out


def test_the_grid_hover_and_clicks_name_the_device_pixel_under_the_pointer(shown):
    g = shown["2"]["grid"]
    assert g["pool"] > 1 and g["seen"] > 10000 and g["clicks"] == 48, g
    assert g["n_wrong"] == 0, g


def test_the_focus_view_hover_and_clicks_name_the_device_pixel_under_the_pointer(shown):
    f = shown["2"]["focus"]
    assert f["pooled"] and f["hot"] > 100 and f["seen"] > 2 * f["hot"] and f["clicks"] == 24, f
    assert f["n_wrong"] == 0, f


def test_the_grid_hover_names_the_device_pixel_under_the_pointer_at_an_odd_offset_in_its_window(shown):
    g = shown["1.5"]["grid_in_window"]
    assert g["pool"] > 1 and g["seen"] > 2000 and g["n_wrong"] == 0, g


def test_the_dla_hover_names_the_device_pixel_under_the_pointer(shown):
    d = shown["2"]["dla"]
    assert d["seen"] > 10000 and d["n_wrong"] == 0, d


@pytest.mark.parametrize("ratio", ["2", "1.5"])
def test_the_compare_tiles_hover_names_the_device_pixel_under_the_pointer(shown, ratio):
    t = shown[ratio]["tiles"]
    assert t["T"] == 2 * t["side"] - 1 and t["seen"] > 2000, t
    if ratio == "1.5":  # (tiles whose edges lie between two device pixels)
        assert any((x * 1.5) % 1 or (y * 1.5) % 1 for x, y in t["corners"]), t
    assert t["n_wrong"] == 0, t


@pytest.mark.parametrize("ratio", ["2", "1.5"])
def test_the_compare_strip_hover_names_the_device_pixel_under_the_pointer(shown, ratio):
    s = shown[ratio]["strip"]
    assert s["cells"] == 40 and s["lines"] > 1 and s["seen"] > 2000, s
    if ratio == "1.5":
        assert any((v * 1.5) % 1 for v in s["origin"]), s
    assert s["n_wrong"] == 0, s


@pytest.mark.parametrize("ratio", ["2", "1.5"])
def test_the_patching_map_hover_names_the_device_pixel_under_the_pointer(shown, ratio):
    pooled, whole = shown[ratio]["patching"]["map300"], shown[ratio]["patching"]["map37"]
    assert max(pooled["pool"]) > 1 and max(whole["pool"]) == 1, (pooled, whole)
    for m in (pooled, whole):
        assert m["fractional"] and m["seen"] > 1500 and m["n_wrong"] == 0, m


def test_the_patching_patterns_hover_names_the_device_pixel_under_the_pointer(shown):
    p = shown["2"]["patterns"]  # (its tile_pixel at other ratios: tests/figures/test_tile_pixel_ratios.py)
    assert p["seen"] > 2000 and p["n_wrong"] == 0, p


def test_the_long_view_names_the_device_pixel_under_the_pointer_at_an_odd_offset_in_its_window(shown):
    t = shown["1.5"]["long_tiles"]  # (cell_at: the pane and the tiles alike)
    assert any((v * 1.5) % 1 for corner in t["corners"] for v in corner), t  # (edges between device pixels)
    assert t["seen"] > 1000 and t["n_wrong"] == 0, t
