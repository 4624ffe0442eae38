"""No label or tooltip of the window swallows a token label that looks like markup. Qt reads a
label's or a tooltip's text as rich text when its first line holds an HTML tag, and '<s>' (Llama's
and Mistral's first token) is one: it vanished and struck out the rest of the line. Here every
token label of the toy decoder starts with '<s>', and so does the text; every dock is raised in
turn and driven (a query and a focused head, Find, the prediction, two generated tokens, a Patching
run, Why here?, a hover over the grid, the focus view, the token strip and each panel's canvas);
after each, every label and tooltip in the window is read: each label says how its text is read (attnviz/ui/views/fields.py: plain_label or rich_label,
so a new label cannot be left to Qt's guess), none read as rich text holds '<s>' unescaped, none
shows an escape ('&lt;') as text, and the texts that quote a token show '<s>' (the sweep reached
them). A second sweep reads what the first leaves shut: Compare with model B, a scan open in
Corpus, the Export dialog, Predict's line of a changed run and the long view."""

from PySide6.QtCore import QEvent, QPoint, QPointF, Qt
from PySide6.QtGui import QHelpEvent
from PySide6.QtGui import Qt as QtG
from PySide6.QtWidgets import (
    QAbstractItemView, QApplication, QComboBox, QDockWidget, QFormLayout, QGraphicsView, QLabel,
    QListWidget, QTableWidget, QToolTip, QWidget,
)

from attnviz.engine.reading.tokenizer import TextTokenizer
from windows import (
    IOI, TOY, WAIT, drain_events, hover, hover_plot, long_view_shown, open_window, shown_label, tip_shown,
    toy_window,
)

MARK = "<s>"
# the labels and the tooltips that quote a token, by where they are (_where): the sweep reads MARK in each
REACHED = {"query_label", "tip query_label", "tip HeatmapGrid.gw", "tip FocusView.gw",
           "tip shown by MainWindow.token_strip", "FindPanel.find_status", "PredictPanel.header",
           "PredictPanel.lens_title", "tip PredictPanel.dla_view", "GeneratePanel.step_label",
           "tip GeneratePanel.rows_view", "PatchingPanel.clean_label", "PatchingPanel.position_label",
           "PatchingPanel.sides_label", "tip PatchingPanel.map", "tip AnatomyPanel.canvas",
           "tip shown by AnatomyPanel.canvas", "CircuitsPanel.ov"}
GRID = 12  # the hovers over each canvas: (GRID - 1)² points
TEXT = MARK + IOI  # (the user's text quotes it too: the Patching tab's clean text)


def _named(widget) -> str | None:
    """The widget as a widget above it names it (FindPanel.find_status), else None."""
    up = widget.parentWidget()
    while up is not None:
        name = next((k for k, v in vars(up).items() if v is widget), None)
        if name is not None:
            return f"{type(up).__name__}.{name}"
        up = up.parentWidget()
    return None


def _where(widget) -> str:
    """The widget as its panel names it, else its object name, else its class in the nearest
    widget named (a list's row: 'CorpusPanel.examples QLabel'), else its class."""
    named = _named(widget) or widget.objectName()
    up = widget.parentWidget()
    while not named and up is not None:
        named = _named(up) and f"{_named(up)} {type(widget).__name__}"
        up = up.parentWidget()
    return named or type(widget).__name__


def _form_labels(w) -> set:
    """The labels QFormLayout made of addRow's strings (Qt's own, their text a literal)."""
    made = set()
    for form in w.findChildren(QFormLayout):
        for row in range(form.rowCount()):
            item = form.itemAt(row, QFormLayout.ItemRole.LabelRole)
            if item is not None and isinstance(item.widget(), QLabel):
                made.add(item.widget())
    return made


def _tips(w, said: list) -> list:
    """(where, tooltip) of every widget, item-view item, combo item and scene item in `w`, and the
    tooltips shown by hand (QToolTip.showText)."""
    tips = [(_where(x), x.toolTip()) for x in w.findChildren(QWidget)]
    for view in w.findChildren(QAbstractItemView):
        if isinstance(view, (QTableWidget, QListWidget)):
            items = ([view.item(r, c) for r in range(view.rowCount()) for c in range(view.columnCount())]
                     if isinstance(view, QTableWidget) else [view.item(r) for r in range(view.count())])
            tips += [(_where(view), i.toolTip()) for i in items if i is not None]
    for box in w.findChildren(QComboBox):
        tips += [(_where(box), str(box.itemData(i, Qt.ItemDataRole.ToolTipRole) or ""))
                 for i in range(box.count())]
    for view in w.findChildren(QGraphicsView):
        if view.scene() is not None:
            tips += [(_where(view), i.toolTip()) for i in view.scene().items()]
    return tips + said


def _sweep(w, said: list, seen: set) -> list:
    """What is wrong with the window's labels and tooltips now, one line each; `seen` gains where
    a label or a tooltip shows MARK as it is."""
    bad, made = [], _form_labels(w)
    for label in w.findChildren(QLabel):
        text, fmt, where = label.text(), label.textFormat(), _where(label)
        if fmt == Qt.TextFormat.AutoText and label not in made:
            bad.append(f"{where}: a label left to Qt's guess (fields.plain_label or rich_label): {text!r}")
        shown = shown_label(label)
        if MARK in text and (fmt == Qt.TextFormat.RichText or (
                fmt == Qt.TextFormat.AutoText and QtG.mightBeRichText(text))):
            bad.append(f"{where}: read as rich text holding {MARK!r}: {text!r}")
        if "&lt;" in shown or "&amp;" in shown:
            bad.append(f"{where}: shows an escape: {shown!r}")
        if MARK in shown:
            seen.add(where)
    for where, tip in _tips(w, said):
        shown = tip_shown(tip)
        if MARK in tip and QtG.mightBeRichText(tip):
            bad.append(f"{where}: a tooltip read as rich text holding {MARK!r}: {tip!r}")
        if "&lt;" in shown or "&amp;" in shown:
            bad.append(f"{where}: a tooltip showing an escape: {shown!r}")
        if MARK in shown:
            seen.add(f"tip {where}")
    return bad


def _raise(qtbot, w, name: str):
    dock = w.findChild(QDockWidget, name)
    if dock.isHidden():
        dock.toggleViewAction().trigger()
    dock.raise_()
    qtbot.waitUntil(lambda: dock.widget() is not None and dock.isVisible(), timeout=WAIT)
    drain_events()
    return dock


def _find(w, qtbot) -> None:
    assert w.roles_panel.find.set_find("@2", "@1") is not None


def _predict(w, qtbot) -> None:
    qtbot.waitUntil(lambda: w.state.effects.analysis is not None, timeout=WAIT)
    w.predict_panel.tabs.setCurrentWidget(w.predict_panel.dla_view)


def _generate(w, qtbot) -> None:
    panel, gen = w.generate_panel, w.state.generation
    panel.n_spin.setValue(2)
    qtbot.mouseClick(panel.generate_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not gen.running and len(gen.steps) == 2, timeout=WAIT)


def _why(w, qtbot) -> None:
    w.why_jobs.set_cell(0, 1, 2, 1)
    qtbot.waitUntil(lambda: w.why_jobs.attribution is not None, timeout=WAIT)


def _anatomy(w, qtbot) -> None:
    qtbot.waitUntil(lambda: w.anatomy_panel.canvas.view is not None, timeout=WAIT)


def _patching(w, qtbot) -> None:
    p = w.patching_panel
    p.propose()
    p.what_box.setCurrentText("resid")  # (its rows are positions, read out with their tokens)
    qtbot.mouseClick(p.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: w.patch_jobs.result is not None and not w.patch_jobs.running
                    and p.map.view is not None and p.map.view.what == "resid", timeout=WAIT)


def _circuits(w, qtbot) -> None:  # (a head's top tokens are asked for once the model's scores are in)
    qtbot.waitUntil(lambda: w.circuits_jobs.ov is not None and w.circuits_panel.ov.text() != "", timeout=WAIT)


DRIVE = {"anatomy_dock": _anatomy, "patching_dock": _patching, "roles_dock": _find,
         "predict_dock": _predict, "generate_dock": _generate, "why_dock": _why, "circuits_dock": _circuits}


def _marked(monkeypatch) -> list:
    """Every token label starts with MARK (the window's, a scan's); -> the list that gains
    (where, text) of each tooltip shown by hand (QToolTip.showText)."""
    real = TextTokenizer._labels
    monkeypatch.setattr(TextTokenizer, "_labels", lambda self, *a: [MARK + t for t in real(self, *a)])
    said = []
    monkeypatch.setattr(QToolTip, "showText",
                        lambda pos, text, by=None, *a: said.append((f"shown by {_where(by)}", text)))
    return said


def _hover_canvases(within: QWidget, hovered: list) -> None:
    """The pointer over each of the canvases in `within` that follow it (not pyqtgraph's views):
    `hovered` gains (where, tooltip) after each move."""
    for canvas in within.findChildren(QWidget):
        if canvas.hasMouseTracking() and canvas.isVisible() and not isinstance(canvas, QGraphicsView):
            r = canvas.rect()
            points = [QPoint(20, 6)] + [  # a title's first line (a map's hover reads it whole), a grid
                QPointF(r.width() * fx / GRID, r.height() * fy / GRID).toPoint()
                for fx in range(1, GRID) for fy in range(1, GRID)]
            for at in points:
                hover(canvas, at)
                hovered.append((_where(canvas), canvas.toolTip()))


def test_no_label_or_tooltip_swallows_a_markup_like_token(qtbot, tmp_path, monkeypatch):
    said = _marked(monkeypatch)
    w = open_window(qtbot, tmp_path / "s.ini", model=TOY, text=TEXT)
    w.resize(1400, 1000)
    st = w.state
    assert st.result.labels[0].startswith(MARK)
    bad, seen, hovered = [], set(), []
    st.set_focus(0, 1)
    st.set_query(1)
    g, fv = w.grid, w.focus_view
    for view_box, view, (x, y) in ((g.vb, g.gw, g.cell_center(0, 1, 2, 1)), (fv.vb, fv.gw, (1.5, 2.5))):
        hover_plot(qtbot, view_box, view, x, y)
    strip = w.token_strip
    at = strip.token_rect(1).center()
    QApplication.sendEvent(strip, QHelpEvent(QEvent.Type.ToolTip, at, strip.mapToGlobal(at)))
    for name in [d.objectName() for d in w.findChildren(QDockWidget)]:
        dock = _raise(qtbot, w, name)
        if name in DRIVE:
            DRIVE[name](w, qtbot)
            drain_events()
        _hover_canvases(dock, hovered)
        bad += _sweep(w, said + hovered, seen)
    w.patch_jobs.cancel()
    w.worker.wait_idle()
    bad = list(dict.fromkeys(bad))  # (a hover read again, the same line)
    assert not bad, f"{len(bad)} wrong:\n" + "\n".join(bad[:40])
    assert not REACHED - seen, f"the sweep never read {MARK!r} in {sorted(REACHED - seen)}"


# what the first sweep leaves shut, reached by the second: each place where it reads MARK
REACHED_LATER = {"tip ComparePanel.strip", "tip ComparePanel.tiles", "tip HeatmapGrid.gw",  # (A − B)
                 "CorpusPanel.examples QLabel",
                 "ExportDialog.error", "PredictPanel.delta_label", "LongView.key_strip", "LongView.readout"}


def _scanned(root) -> str:
    """A scan of TEXT by the toy decoder, in this process (its labels marked as the window's)."""
    from attnviz.corpus.scan import scan

    (root / "c.txt").write_text(TEXT + "\n" + IOI + "\n")
    with open(root / "progress", "w") as progress:
        scan(root / "out", TOY, root / "c.txt", batch=2, examples=2, in_process=True,
             progress_stream=progress)
    return str(root / "out")


def test_compare_corpus_the_long_view_export_and_a_changed_run_keep_a_markup_like_token(
        qtbot, tmp_path, monkeypatch):
    """The places the first sweep leaves shut, on the same marked labels: Compare with model B
    (its panel, its readouts, the grid showing A − B), a scan open in Corpus with a head's
    examples listed, the Export dialog (its note while the grid shows A − B, its error quoting a
    path), Predict's line of the change a head switched off makes, and the long view hovered."""
    from attnviz.engine.analysing.effects import Ablation, is_changed
    from attnviz.ui.export import ExportDialog
    from attnviz.ui.machinery.compare_jobs import BSource
    from attnviz.ui.panels.compare_menu import open_compare

    said = _marked(monkeypatch)
    scan_dir = _scanned(tmp_path)
    w = toy_window(qtbot, tmp_path / "s.ini", TEXT)
    w.resize(1400, 1000)
    st, bad, seen, hovered = w.state, [], set(), []

    def swept(dock_name=None, within=None) -> None:
        within = within or (_raise(qtbot, w, dock_name) if dock_name else w)
        _hover_canvases(within, hovered)
        bad.extend(_sweep(w, said + hovered, seen))

    st.set_focus(0, 1)
    st.set_query(1)
    jobs = w.worker.compare_jobs
    open_compare(w, BSource("checkpoint", 0))
    qtbot.waitUntil(lambda: jobs.comparison is not None and jobs.comparison.result.text == TEXT
                    and jobs.comparison.doc["kld"] is not None, timeout=WAIT)
    drain_events()
    swept("compare_dock")
    jobs.set_mode("A-B")
    drain_events()
    hover_plot(qtbot, w.grid.vb, w.grid.gw, *w.grid.cell_center(0, 1, 2, 1))
    dialog = ExportDialog(st, w, w.settings, compare=jobs)
    qtbot.addWidget(dialog)
    (tmp_path / MARK).write_text("")  # a file where the export wants a folder: its error quotes the path
    dialog.path_edit.setText(str(tmp_path / MARK / "x.csv"))
    dialog.do_export()
    dialog.show()
    assert dialog.note.isVisible() and dialog.error.isVisible()
    swept(within=dialog)
    dialog.close()
    jobs.close()
    w.worker.wait_idle()

    w.open_scan(scan_dir)
    corpus = w.corpus_panel
    qtbot.waitUntil(lambda: corpus.scan is not None, timeout=WAIT)
    corpus.pick_head(0, 1)
    qtbot.waitUntil(lambda: corpus.examples.count() > 0, timeout=WAIT)
    swept("corpus_dock")

    _raise(qtbot, w, "predict_dock")  # (its numbers are worked out while it is in sight)
    st.effects.set_ablation(Ablation(heads=((0, 0),)))
    panel = w.predict_panel
    qtbot.waitUntil(lambda: is_changed(st.result) and panel.delta_label.text() != "", timeout=WAIT)
    swept("predict_dock")

    long = long_view_shown(w, qtbot, TEXT + " " + IOI * 3)
    assert long.run.result.labels[0].startswith(MARK)
    swept(within=w.grid_stack)
    w.worker.wait_idle()
    bad = list(dict.fromkeys(bad))
    assert not bad, f"{len(bad)} wrong:\n" + "\n".join(bad[:40])
    assert not REACHED_LATER - seen, f"the sweep never read {MARK!r} in {sorted(REACHED_LATER - seen)}"


def test_a_refused_memory_budget_quotes_what_was_typed_as_typed(window, monkeypatch):
    """The message box's text is rich text where its first line holds a tag: a typed '<b>' is
    shown as typed, not swallowed."""
    from PySide6.QtWidgets import QInputDialog, QMessageBox

    warned = []
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("<b>", True))
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: warned.append(a[2]))
    window.menus.memory_budget_action.trigger()
    assert len(warned) == 1 and "'<b>'" in tip_shown(warned[0]), warned


def test_a_name_in_a_menu_or_on_a_button_keeps_its_ampersand():
    """Qt reads one '&' in a menu entry's or a button's text as the mark of a shortcut key: a
    model named 'Q&A' would read 'QA' with Alt+A its key."""
    from PySide6.QtGui import QKeySequence

    from attnviz.ui.views.fields import menu_text

    assert not QKeySequence.mnemonic("Load Q&A").isEmpty()  # (what the bare name would do)
    assert QKeySequence.mnemonic(menu_text("Load Q&A")).isEmpty()


def test_the_knock_out_menu_names_a_token_holding_an_ampersand(window):
    """A token '&' in the grid's context menu reads '&', not a shortcut mark."""
    from PySide6.QtGui import QKeySequence

    from attnviz.ui.panels.ablation_panel import head_menu

    window.state.result.labels[1] = "&"
    texts = [a.text() for a in head_menu(window.state, 0, 0, 2, 1, window).actions()]
    knock = [t for t in texts if t.startswith("Knock out")]
    assert knock and all(QKeySequence.mnemonic(t).isEmpty() for t in knock), knock
