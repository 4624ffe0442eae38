"""An exported layer's panel titles are the grid's tile titles (figures/titles.tile_marks writes
both): the layer's kind, `· off` on a switched-off head and, value-weighted, its `% out`, with the
role badge; the picture adds only the KV group (` · kv0`), which the grid's bands name below its
tiles. (The export wrote its own titles: `L0 H1 · kv0`, without the rest.)"""

import xml.etree.ElementTree as ET

from attnviz.ui.export import ExportDialog
from tiny import FIXTURES
from windows import WAIT, open_window

TEXT = "1, 2, 3, 4, 5"


def _export(w, monkeypatch, path):
    """File -> Export of the grid's layer as an SVG, by the dialog as a user makes it."""
    seen = []
    monkeypatch.setattr(ExportDialog, "exec", lambda self: seen.append(self) or 0)
    w.export_dialog()
    dlg = seen[0]
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    dlg.format.setCurrentIndex(dlg.format.findData("svg"))
    dlg.path_edit.setText(str(path))
    assert dlg.do_export(), dlg.error.text()
    texts = [e.text for e in ET.fromstring(path.read_bytes()).iter() if e.tag.endswith("text") and e.text]
    return [t for t in texts if t.startswith("L0 H")]


def test_the_exported_titles_are_those_the_grid_shows(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(FIXTURES / "gemma3"), text=TEXT)
    st, g = w.state, w.grid
    st.set_layer(0)
    st.set_value_weighted(True)
    st.effects.toggle_head(0, 2)
    qtbot.waitUntil(lambda: st.result.value_norms is not None and len(g.titles()) == 4
                    and "\u00b7 off" in g.titles()[2], timeout=WAIT)
    shown = g.titles()
    assert all(t.startswith(f"L0 H{h} \u00b7 local (window 8)") and "% out" in t for h, t in enumerate(shown))
    exported = _export(w, monkeypatch, tmp_path / "layer.svg")
    assert [t.replace(" \u00b7 kv0", "") for t in exported] == shown
    assert all(" \u00b7 kv0" in t for t in exported)


def test_a_head_whose_ablation_was_not_applied_is_not_marked_off_in_the_grid_or_the_export(
        qtbot, tmp_path, monkeypatch):
    """An ablation that cannot apply to the text (an edge outside its tokens) leaves the run
    clean: no title says `· off`, the grid's as the export's."""
    w = open_window(qtbot, tmp_path / "s.ini", model=str(FIXTURES / "gemma3"), text=TEXT)
    st, g = w.state, w.grid
    st.set_layer(0)
    st.effects.toggle_head(0, 2)
    st.effects.toggle_knockout((0,), 40, 0)

    def refused():
        run = st.effects.run_of(st.result)
        return run is not None and "not applied" in run.note and g.drawn is st.result
    qtbot.waitUntil(refused, timeout=WAIT)
    shown = g.titles()
    assert len(shown) == 4 and not any("off" in t for t in shown), shown
    assert [t.replace(" \u00b7 kv0", "") for t in _export(w, monkeypatch, tmp_path / "layer.svg")] == shown
