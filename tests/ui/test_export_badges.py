"""An exported heatmap figure titles its panels as the grid titles its tiles: each head's role badge
after its name, the same title forms (figures/titles.title_forms), shortened alike where a panel is
narrow, and its notes then say what the short titles abbreviate. (The figure wrote "L1 H0" alone
under badged tiles.)"""

import re

from PySide6.QtCore import Qt

from attnviz.figures import render
from attnviz.figures.roles import short_badge
from attnviz.figures.titles import abbreviations
from attnviz.ui.export import ExportDialog
from windows import TOY, WAIT, drain_events, figure_words, open_window

TITLE = re.compile(r"(L\d+ )?H\d+\b.*")


def _export(qtbot, st, path, width: int, monkeypatch, scale: str = "shared") -> list[str]:
    """The words of the grid's layer exported through the dialog at `width` pixels, as drawn."""
    words = figure_words(monkeypatch, render)
    dlg = ExportDialog(st, None)
    qtbot.addWidget(dlg)
    dlg.scope.setCurrentIndex(dlg.scope.findData("layer"))
    dlg.scale.setCurrentIndex(dlg.scale.findData(scale))
    dlg.format.setCurrentIndex(dlg.format.findData("png"))
    dlg.width_box.setValue(width)
    dlg.path_edit.setText(str(path))
    with qtbot.waitSignal(st.sigStatus, timeout=WAIT):
        qtbot.mouseClick(dlg.export_button, Qt.MouseButton.LeftButton)
    return list(words)


def test_the_exported_panels_carry_the_grids_role_badges(qtbot, tmp_path, monkeypatch):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY, text="the cat sat on the mat. the cat sat on")
    st, g = w.state, w.grid
    st.set_layer(1)
    qtbot.waitUntil(lambda: st.head_labels is not None and all(st.head_labels[1]) and g.drawn is st.result
                    and all("  " in t for t in g.titles()), timeout=WAIT)
    drain_events()
    badges = st.head_labels[1]
    words = _export(qtbot, st, tmp_path / "wide.png", 1600, monkeypatch)
    assert [t for t in words if TITLE.fullmatch(t)] == g.titles()  # "L1 H0  sink", as the grid's
    assert not any(t.startswith("titles: ") for t in words)
    st.set_role_options(source="probe")  # (badges "induction (probe)": too wide for a narrow panel)
    qtbot.waitUntil(lambda: st.head_labels is not None and all(b.endswith(" (probe)") for b in st.head_labels[1]),
                    timeout=WAIT)
    badges = st.head_labels[1]
    words = _export(qtbot, st, tmp_path / "narrow.png", 900, monkeypatch, "per-head")
    titles = [t for t in words if TITLE.fullmatch(t)]  # each with its max, its badge short, alike
    assert [re.sub(r"max \d\.\d\d", "max m", t) for t in titles] == \
        [f"H{h}  max m  {short_badge(b)}" for h, b in enumerate(badges)], titles
    short = abbreviations(badges)
    assert short and any(line.endswith(f"titles: {short}") for line in words), words
    w.worker.wait_idle()
