"""scripts/screenshot.py --ablate N is applied on every path that makes a picture (the Head roles
panel scored on a probe returned before it was), and refused, saying why, where it cannot be; and
--panel generate opens the scene it shows."""

import os
import subprocess
import sys
from pathlib import Path

from PySide6.QtGui import QColor, QImage

from attnviz.figures.style import WARNING

REPO = Path(__file__).resolve().parents[2]


def _screenshot(tmp_path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(tmp_path / "cfg"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, str(REPO / "scripts" / "screenshot.py"), *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)


def test_the_roles_probe_picture_shows_the_changed_run(tmp_path):
    out = tmp_path / "roles.png"
    done = _screenshot(tmp_path, "--scene", "toy", "--panel", "roles", "--roles-source", "probe",
                       "--ablate", "1", "--out", str(out))
    assert done.returncode == 0, done.stderr
    image = QImage(str(out))
    warning = QColor(WARNING).rgb()
    bar = sum(image.pixel(x, y) == warning for y in range(0, image.height(), 2)
              for x in range(0, image.width(), 2))
    # the orange "Changed run" bar above the grid, the window's width: over 2,000 of these samples
    assert bar > 2000, f"{bar} pixels of the changed run's bar in the picture"


def test_ablate_where_it_cannot_apply_is_refused_with_the_reason(tmp_path):
    out = tmp_path / "agreement.png"
    done = _screenshot(tmp_path, "--scene", "agreement", "--ablate", "1", "--out", str(out))
    assert done.returncode == 2 and not out.exists()
    assert "--ablate switches off the induction or toy scene's strongest induction heads: not with " \
           "--scene agreement" in done.stderr


def test_ablate_of_fewer_than_one_head_or_more_than_the_model_has_is_refused(tmp_path):
    out = tmp_path / "toy.png"
    for n in ("-1", "0"):
        done = _screenshot(tmp_path, "--scene", "toy", "--ablate", n, "--out", str(out))
        assert done.returncode == 2 and not out.exists()
        assert f"argument --ablate: N heads to switch off is at least 1, not {n}" in done.stderr
    done = _screenshot(tmp_path, "--scene", "toy", "--ablate", "1000", "--out", str(out))
    assert done.returncode == 1 and not out.exists()
    assert "--ablate 1000: this model has " in done.stderr and " heads (" in done.stderr


def test_the_generate_panel_implies_its_scene_and_refuses_another(tmp_path):
    """--panel generate alone opens the generate scene (SmolLM2 generating, which the Generate panel
    shows), not the induction scene with the Focus head tab raised; beside another scene it is
    refused, saying why."""
    import runpy

    parse_args = runpy.run_path(str(REPO / "scripts" / "screenshot.py"), run_name="shots")["parse_args"]
    assert parse_args(["--panel", "generate"]).scene == "generate"
    assert parse_args(["--panel", "generate", "--scene", "generate"]).scene == "generate"
    assert parse_args([]).scene == "induction" and parse_args(["--panel", "why"]).scene == "induction"
    out = tmp_path / "generate.png"
    done = _screenshot(tmp_path, "--panel", "generate", "--scene", "agreement", "--out", str(out))
    assert done.returncode == 2 and not out.exists()
    assert "--panel generate shows the generate scene's run: not with --scene agreement" in done.stderr
