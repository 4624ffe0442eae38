"""Value-weighted exports: the numbers and the image are what the window's Value-weighted view
shows (a_qk * ||v_k W_O(h)||, rows renormalised, then the first key hidden) and the sidecar says so.
The window's dialog and Open view: tests/ui/test_value_weighted_ui.py; the command line: tests/cli."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnviz.engine.computing.patterns import drop_first_key, value_weighted  # noqa: E402
from attnviz.figures.data import ExportError, csv_text, json_text, make_view, open_sidecar  # noqa: E402
from attnviz.engine.computing.request import RunRequest

SENTENCE = "The keys to the cabinet are on the table."


@pytest.fixture(scope="module")
def run(minilm):
    return minilm.run(SENTENCE, request=RunRequest(values=True))


def test_the_view_holds_the_weighted_patterns_and_says_so(run):
    view = make_view(run, model="m", scope="layer", layer=2, value_weighted=True)
    want = value_weighted(run.attentions[2], run.value_norms[2])  # [n_head, T, T]
    np.testing.assert_allclose(view.patterns[0], want, rtol=1e-6)
    assert not np.allclose(view.patterns[0], run.attentions[2], atol=1e-3)  # it is not the plain view
    assert view.value_weighted and "value-weighted" in view.title()
    # hidden first key after the weighting, as in the window
    hidden = make_view(run, model="m", scope="head", layer=2, head=5, hide_first=True, value_weighted=True)
    np.testing.assert_allclose(hidden.patterns[0, 0], drop_first_key(want[5]), rtol=1e-6)
    doc = json.loads(json_text(hidden))
    assert doc["value_weighted"] is True and doc["hide_first"] is True
    assert csv_text(view).splitlines()[0].endswith(",value_weighted_weight")
    assert csv_text(hidden).startswith(
        '"query \\ key (value-weighted; first key hidden, rows renormalised)",')
    plain = make_view(run, model="m", scope="layer", layer=2)
    assert not plain.value_weighted and csv_text(plain).splitlines()[0].endswith(",weight")


def test_a_result_without_value_norms_is_refused(minilm):
    with pytest.raises(ExportError, match="needs the value norms"):
        make_view(minilm.run(SENTENCE), model="m", scope="all", layer=0, value_weighted=True)


def test_the_png_is_coloured_by_the_weighted_values_and_the_sidecar_round_trips(qapp, run, tmp_path):
    from PySide6.QtGui import QImage

    from attnviz.figures.style import heat_index, heat_table
    from attnviz.figures.write import export_result

    out = tmp_path / "vw.png"
    export_result(run, out, model="all-MiniLM-L6-v2", scope="head", layer=3, head=1, width=1200,
                  value_weighted=True)
    meta = open_sidecar(out)
    assert meta["value_weighted"] is True
    (panel,) = meta["panels"]
    want = value_weighted(run.attentions[3, 1], run.value_norms[3, 1])
    img, lut = QImage(str(out)), heat_table("viridis")[:, :3]
    top = float(value_weighted(run.attentions, run.value_norms).max())  # the shared scale: the run's top
    for q, k in ((0, 0), (4, 2), (10, 11)):
        c = img.pixelColor(int(panel["x"] + (k + 0.5) * panel["cell"]), int(panel["y"] + (q + 0.5) * panel["cell"]))
        assert (c.red(), c.green(), c.blue()) == tuple(lut[heat_index(want[q, k], top)])
    # an older sidecar has no value_weighted: it opens as the plain view
    side = json.loads(out.with_name("vw.png.json").read_text())
    del side["value_weighted"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(side))
    assert open_sidecar(old)["value_weighted"] is False
    side["value_weighted"] = "yes"
    old.write_text(json.dumps(side))
    with pytest.raises(ExportError, match="value_weighted should be true or false"):
        open_sidecar(old)
