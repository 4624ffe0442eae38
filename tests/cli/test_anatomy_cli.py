"""The headless `attnviz export --view anatomy`: a PNG of the asked width with the focused head's
slice in the focus colour, its sidecar, and a numbers file refused in one line."""

import json
import os
import subprocess
import sys

from PySide6.QtGui import QImage

from attnviz.figures import anatomy as fig

TEXT = "The keys to the cabinet are on the table."


def _png(path):
    img = QImage(str(path))
    assert not img.isNull()
    return img


def test_headless_cli_export(tmp_path):
    out = tmp_path / "anatomy.png"
    env = dict(os.environ)
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("DISPLAY", None)
    proc = subprocess.run([sys.executable, "-m", "attnviz", "export", "--view", "anatomy",
                           "--model", "all-MiniLM-L6-v2", "--text", TEXT, "--layer", "2",
                           "--head", "4", "--width", "900", "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    img = _png(out)
    assert img.width() == 900
    side = json.loads((tmp_path / "anatomy.png.json").read_text())
    wq = next(b for b in side["blocks"] if b["block"] == "w_q")
    # head 4's slice strip above W_Q is the focus colour
    x = wq["x"] + wq["w"] * 4.5 / 12
    c = img.pixelColor(int(x), int(wq["y"] - 1))
    assert c.name() == fig.FOCUS
    bad = subprocess.run([sys.executable, "-m", "attnviz", "export", "--view", "anatomy",
                          "--model", "all-MiniLM-L6-v2", "--out", str(tmp_path / "a.npy")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "anatomy" in bad.stderr and len(bad.stderr.splitlines()) == 1
