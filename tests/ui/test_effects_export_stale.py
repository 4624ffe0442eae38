"""File -> Export -> prediction after the text changed while What heads do was hidden: the export
holds the prediction of the text the window shows now (never the hidden panel's older analysis,
whose query position may lie past the new text's end), or refuses with a message."""

import json

import numpy as np

from attnviz.engine.analysing.effects import analyse, window_run
from windows import WAIT, open_window, wait_for_text

LONG = "the cat sat on the mat . the dog sat on the rug . the cat sat on the"
SHORT = "the dog ran to the"


def _export(w, tmp_path, scope, name, fmt="json"):
    from attnviz.ui.export import ExportDialog

    dialog = ExportDialog(w.state, w, w.settings)
    dialog.scope.setCurrentIndex(dialog.scope.findData(scope))
    dialog.format.setCurrentIndex(dialog.format.findData(fmt))
    dialog.path_edit.setText(str(tmp_path / name))
    ok = dialog.do_export()
    return ok, dialog.error.text()


def test_export_after_a_shorter_text_in_another_tab_holds_the_new_texts_prediction(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "e.ini", model="attnviz-textbook", panels=("predict",), text=LONG)
    eff = w.state.effects
    w.predict_dock.show()
    w.predict_dock.raise_()

    def analysed():
        w.worker.effects_jobs.flush()
        return eff.analysis is not None and eff.run is not None and eff.run.result is w.state.result
    qtbot.waitUntil(analysed, timeout=WAIT)
    old = eff.analysis
    assert old.position == w.state.result.n_tokens - 1
    w.focus_dock.raise_()  # another tab: the prediction is no longer wanted
    qtbot.waitUntil(lambda: not eff.wanted, timeout=WAIT)
    w.set_text(SHORT)
    wait_for_text(qtbot, w, SHORT)
    w.worker.wait_idle()
    r = w.state.result
    assert r.n_tokens <= old.position  # the hidden panel's query lies past the new text's end
    for scope in ("prediction", "lens", "dla"):
        ok, error = _export(w, tmp_path, scope, f"{scope}.json")
        assert ok, error
        got = json.loads((tmp_path / f"{scope}.json").read_text())
        assert got["text"] == SHORT and got["position"] == r.n_tokens - 1
    ok, error = _export(w, tmp_path, "prediction", "prediction.png", "png")  # its title names the token
    assert ok, error
    model = w.state.model
    ref = analyse(model, window_run(model, SHORT))
    got = json.loads((tmp_path / "prediction.json").read_text())
    assert [t["id"] for t in got["top"]] == ref.clean.top_ids.tolist()
    np.testing.assert_allclose([t["logprob"] for t in got["top"]], ref.clean.top_logprobs, rtol=1e-5)
    w.worker.wait_idle()


def test_a_prediction_of_another_text_is_refused_in_one_line(qapp):
    import pytest

    from attnviz.engine import load_model
    from attnviz.figures.data import ExportError
    from attnviz.figures.effects import effects_view

    model = load_model("attnviz-textbook")
    a = analyse(model, window_run(model, LONG))
    short = model.run(SHORT)
    with pytest.raises(ExportError, match=rf"after token {a.position}, past the {short.n_tokens} tokens"):
        effects_view("prediction", a, model=model.name, result=short, kv_group=short.kv_group)


def test_an_encoder_refuses_the_prediction_export_with_a_message(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "m.ini", panels=("predict",), text=SHORT)
    ok, error = _export(w, tmp_path, "prediction", "p.json")
    assert not ok and "predicts no next token" in error
    w.worker.wait_idle()
