"""The Circuits tab says only what applies to the model: that the weight-space scores leave RoPE
out, for a model with RoPE (not MiniLM or GPT-2, which have none), and to pick a token to see what
the focused head writes, for a model with an unembedding (not an encoder: it has no copying map
and no top tokens either)."""

import json

from attnviz.engine.analysing import circuits as C
from attnviz.figures import circuits as fig
from windows import WAIT, drain_events, open_window


def test_an_encoder_is_told_neither(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "m.ini", panels=("why",))  # MiniLM: an encoder without RoPE
    st, panel = w.state, w.circuits_panel
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: w.circuits_jobs.circuits is not None, timeout=WAIT)
    st.show_head(1, 0)
    st.set_query(2)
    w.worker.wait_idle()
    drain_events()
    assert "top partners" in panel.partners.text()
    shown = [lab.text() for lab in (panel.note, panel.partners, panel.ov) if lab.isVisibleTo(panel)]
    assert not any("RoPE" in t or "Pick a token" in t or "writes" in t for t in shown), shown
    assert w.circuits_jobs.ov is None and w.circuits_jobs.ov_note == ""  # none asked for
    (js,) = panel.export_to(str(tmp_path / "c.json"))
    assert "note" not in json.loads(js.read_text())


def test_the_rope_note_is_for_a_model_with_rope(toy):
    circuits = C.circuits(toy)
    plain = fig.circuits_view(circuits, model=toy.name, rope=False)
    rotary = fig.circuits_view(circuits, model=toy.name, rope=True)
    assert plain.note() == "" and "note" not in fig.numbers(plain)
    assert "ignore RoPE" in rotary.note() and fig.numbers(rotary)["note"] == rotary.note()
