"""File -> Export while heads are switched off: the grid shows the changed run, and so does the
export, which says so (the figure's title, the numbers' JSON and CSV header, the sidecar that
File -> Open view restores, the suggested file name); a Value-weighted export, run again for the
value norms, is of the changed run too, not of the clean one, and so is the Anatomy's."""

import csv
import json

import numpy as np

from attnviz.engine.analysing.effects import Ablation, is_changed, window_run
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.computing.patterns import value_weighted
from attnviz.figures.data import open_sidecar
from attnviz.ui.export import ExportDialog, anatomy_view, apply_view
from windows import IOI, TOY, WAIT, open_window

OFF = Ablation(heads=((0, 0),))


def _export(w, path, scope, weighted=False):
    dlg = ExportDialog(w.state, w, w.settings)
    dlg.scope.setCurrentIndex(dlg.scope.findData(scope))
    dlg.value_weighted.setChecked(weighted)
    dlg.path_edit.setText(str(path))
    dlg._path_edited(str(path))
    assert dlg.do_export(), dlg.error.text()
    return dlg


def test_an_export_of_the_changed_run_says_what_was_switched_off(qtbot, settings_path, tmp_path):
    w = open_window(qtbot, settings_path, model=TOY, text=IOI)
    st = w.state
    st.effects.set_ablation(OFF)
    qtbot.waitUntil(lambda: is_changed(st.result), timeout=WAIT)
    st.set_layer(1)
    st.set_focus(1, 0)
    model = st.model
    changed = window_run(model, IOI, ablation=OFF, request=RunRequest(truncate=True, values=True)).result
    clean = model.run(IOI, request=RunRequest(use_cache=False)).attentions
    assert np.abs(changed.attentions[1] - clean[1]).max() > 1e-3  # layer 1 reads the head switched off

    _export(w, tmp_path / "all.json", "all")
    doc = json.loads((tmp_path / "all.json").read_text())
    assert doc["ablation"] == OFF.to_json()
    np.testing.assert_allclose(doc["weights"], changed.attentions, atol=1e-6)

    _export(w, tmp_path / "layer.csv", "layer")
    rows = list(csv.reader((tmp_path / "layer.csv").open()))
    assert rows[0][-1] == "weight (zero-ablated L0 H0)"

    _export(w, tmp_path / "head.csv", "head")
    assert next(csv.reader((tmp_path / "head.csv").open()))[0] == "query \\ key (zero-ablated L0 H0)"

    _export(w, tmp_path / "head.svg", "head")
    assert open_sidecar(tmp_path / "head.svg")["ablation"] == OFF.to_json()
    assert "L1 H0 \u00b7 zero-ablated L0 H0" in (tmp_path / "head.svg").read_text()  # the figure's title

    dlg = ExportDialog(st, w, w.settings)
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    dlg.format.setCurrentIndex(dlg.format.findData("npy"))
    assert dlg.path_edit.text().endswith("_L1_zero-ablated-L0H0.npy"), dlg.path_edit.text()

    st.set_view_mode("layer")
    _export(w, tmp_path / "vw.npy", "layer", weighted=True)  # the grid was not value-weighted: run again
    want = value_weighted(changed.attentions, changed.value_norms)[1]
    np.testing.assert_allclose(np.load(tmp_path / "vw.npy"), want, atol=1e-6)

    assert st.result.layer_inputs is None  # (the Anatomy tab is hidden: its export runs again)
    st.set_layer(0)
    assert any("H0 switched off" in n for n in anatomy_view(st).notes)

    st.effects.set_ablation(Ablation())  # File -> Open view of the figure switches the head off again
    assert apply_view(st, open_sidecar(tmp_path / "head.svg")) is None
    assert st.effects.ablation == OFF
    w.worker.wait_idle()
