"""The Circuits tab says only what applies to the model: that the weight-space scores leave RoPE
out, for a model with RoPE (not MiniLM or GPT-2, which have none), and to pick a token to see what
the focused head writes, for a model with an unembedding (not an encoder: it has no copying map
and no top tokens either)."""

import json
import re

import numpy as np

from PySide6.QtCore import Qt

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
    assert not any("RoPE" in t or "Pick a query token" in t or "writes" in t for t in shown), shown
    assert w.circuits_jobs.ov is None and w.circuits_jobs.ov_note == ""  # none asked for
    (js,) = panel.export_to(str(tmp_path / "c.json"))
    assert "note" not in json.loads(js.read_text())


def test_the_rope_note_is_for_a_model_with_rope(toy):
    circuits = C.circuits(toy)
    plain = fig.circuits_view(circuits, model=toy.name, rope=False)
    rotary = fig.circuits_view(circuits, model=toy.name, rope=True)
    assert plain.note() == "" and "note" not in fig.numbers(plain)
    assert "ignore RoPE" in rotary.note() and fig.numbers(rotary)["note"] == rotary.note()


def test_an_encoder_picked_before_its_scores_asks_for_no_top_tokens(qtbot, tmp_path):
    """A head and a token picked before the Circuits tab opens on MiniLM (an encoder, no
    unembedding): the tab waits for the scores, which say there is no copying map, and sends no
    top-token job the engine would refuse; it shows the partners, no line on what the head writes,
    and no error."""
    from attnviz.ui.machinery.why_jobs import OV_KIND

    w = open_window(qtbot, tmp_path / "m.ini", panels=("why",))
    st, panel, jobs = w.state, w.circuits_panel, w.circuits_jobs
    sent, submit = [], w.worker.submit
    w.worker.submit = lambda kind, *a, **kw: (sent.append(kind), submit(kind, *a, **kw))[1]
    st.show_head(1, 0)
    st.set_query(2)
    assert jobs.circuits is None
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: jobs.circuits is not None, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    assert OV_KIND not in sent, sent
    assert jobs.ov is None and jobs.ov_note == ""
    assert jobs.circuits.copying is None
    assert "top partners" in panel.partners.text() and not panel.ov.isVisibleTo(panel)
    view = panel.map_view  # its text painted, wrapped, in place of the map: whole, in sentences
    assert view.map is None and view.isVisible()
    assert view.empty_text == (
        "No copying map. A head's copying score and the tokens it writes are read through the "
        "model's unembedding, and all-MiniLM-L6-v2 is an encoder, so it predicts "
        "no next token. The composition partners below still apply; open a decoder from the Models "
        "menu for copying.")
    box = view.rect().adjusted(8, 8, -8, -8)
    flags = Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap
    assert box.contains(view.fontMetrics().boundingRect(box, flags, view.empty_text))


def test_a_decoder_picked_before_its_scores_shows_what_the_head_writes_once_they_arrive(qtbot, tmp_path, toy):
    """The toy decoder, a head and a token picked before the tab opens: the line on what the head
    writes comes once the scores say the model has an unembedding."""
    from attnviz.engine.reading.registry import TOY_MODEL

    w = open_window(qtbot, tmp_path / "t.ini", model=TOY_MODEL, text="abcabc", panels=("why",))
    st, panel = w.state, w.circuits_panel
    st.show_head(1, 0)
    st.set_query(1)
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: "writes, in logits:" in panel.ov.text(), timeout=WAIT)
    key = int(np.argmax(st.result.attentions[1, 0, 1]))  # (the head's top key at the query)
    top = C.ov_top(st.model, 1, 0, int(st.result.input_ids[key]), 10)
    assert f"'{top[0][1]}'" in panel.ov.text()
    w.worker.wait_idle()


def test_a_decoder_whose_file_lacks_its_unembedding_is_told_what_is_missing(qtbot, tmp_path):
    """A Llama whose file has no lm_head.weight: no copying map, and the tab says the file lacks
    the unembedding and to open a model that has one, not to open a decoder (it is one)."""
    import shutil

    from safetensors.numpy import load_file, save_file
    from tiny import FIXTURES

    folder = tmp_path / "nohead"
    shutil.copytree(FIXTURES / "llama_gqa", folder)
    t = load_file(folder / "model.safetensors")
    del t["lm_head.weight"]
    save_file(t, str(folder / "model.safetensors"))
    w = open_window(qtbot, tmp_path / "n.ini", model=str(folder), text="5, 17, 3", panels=("why",))
    panel = w.circuits_panel
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: w.circuits_jobs.circuits is not None, timeout=WAIT)
    w.worker.wait_idle()
    drain_events()
    view = panel.map_view
    assert view.map is None and view.isVisible()
    assert view.empty_text == (
        "No copying map. A head's copying score and the tokens it writes are read through the "
        "model's unembedding, and nohead predicts no next token because the checkpoint in nohead/ "
        "has no unembedding lm_head.weight. The composition partners below still apply; for "
        "copying, open a model whose file holds a usable final norm and unembedding, from the "
        "Models menu.")
    assert "decoder" not in view.empty_text
    box = view.rect().adjusted(8, 8, -8, -8)
    flags = Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft | Qt.TextFlag.TextWordWrap
    assert box.contains(view.fontMetrics().boundingRect(box, flags, view.empty_text))


def test_a_model_whose_ov_circuits_are_zero_is_told_why_it_has_no_copying_map(qtbot, tmp_path):
    """The textbook decoder: every head's W_E W_V W_O W_U is exactly zero, so no copying map (not
    a map of +0.00), with that reason, and no model to open instead."""
    from windows import TEXTBOOK

    w = open_window(qtbot, tmp_path / "t.ini", model=TEXTBOOK, panels=("why",))
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: w.circuits_jobs.circuits is not None, timeout=WAIT)
    drain_events()
    view = w.circuits_panel.map_view
    assert view.map is None and view.isVisible()
    assert view.empty_text == (f"No copying map. {C.ZERO_OV[:1].upper()}{C.ZERO_OV[1:]}. The composition "
                               "partners below still apply.")


def test_a_composition_of_0_over_0_is_no_partner_in_the_tab(qtbot, tmp_path):
    """The textbook decoder's L1 H0: of its earlier heads only L0 H0 writes (W_V W_O not zero), and
    L1 H0 reads nothing through its values, so its partners list L0 H0 alone for Q and K, none for
    V, each counting the rest n/a, with the reason under them (not 0.000 for every pair); Q's
    score, exactly 0 but 1.1e-6 in float32, reads <0.001, not 0.000."""
    from windows import TEXTBOOK

    w = open_window(qtbot, tmp_path / "t.ini", model=TEXTBOOK, panels=("why",))
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: w.circuits_jobs.circuits is not None, timeout=WAIT)
    w.state.show_head(1, 0)
    drain_events()
    label = w.circuits_panel.partners
    assert label.isVisible()
    lines = [re.sub(r" \[[^\]]*\]", "", line) for line in label.text().splitlines()[1:]]  # (role badges: once scored)
    assert lines == [
        "  Q-composition (reads them in its queries): L0 H0 <0.001 (2 of 3 earlier heads n/a)",
        "  K-composition (reads them in its keys): L0 H0 0.109 (2 of 3 earlier heads n/a)",
        "  V-composition (reads them in its values): none (3 of 3 earlier heads n/a)",
        f"  n/a: {C.ZERO_COMPOSITION}."]
