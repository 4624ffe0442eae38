"""The Patching tab: activation patching between the clean text (the sentence box) and a corrupted
one (engine/analysing/patching.py; the runs are ui/machinery/patch_jobs.py's).

- The corrupted text has a box of its own; "Corrupt" proposes one (a name or a repeated word
  swapped for a word of the same token length) and says what it swapped. Two texts of different
  lengths get one line with both lengths and their token lists aligned, a ^ where they part.
- Target and alt are typed as tokens (empty: the engine's defaults), the position P picked in its
  box (default: the last token, the clean token at P shown beside it); the clean and corrupted
  predictions at P and their diff show as soon as the two runs are made.
- A Run's refusal line goes once a box it spoke of changes; the lengths line comes back while
  it holds.
- When either text changes after a run, the map, the patterns and the predictions are dimmed
  under a line naming the texts they were computed for, until Run (no re-run on typing: a
  patching run is many forward passes, and the texts pass through unequal lengths while edited).
- What to patch, Run, Cancel, a progress bar; the run is off the main thread, newest wins.
- The map (figures/patching.py) in a diverging colour map about the unchanged effect (0 denoising,
  1 noising) with its colour bar; hover reads
  a cell's effect; a click on a head shows its pattern on the clean and the corrupted text side by
  side and focuses it in the grid.
- Export: PNG/SVG with a sidecar that File > Open view restores, or the numbers (JSON, CSV)."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QComboBox, QFileDialog, QGridLayout, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton,
    QSpinBox, QVBoxLayout, QWidget,
)

from attnviz.engine.analysing.predict import TOKEN_RULE
from attnviz.engine.computing.checkpoints import checkpoint_record
from attnviz.engine.reading.token_text import tokens
from attnviz.engine.reading.token_text import quoted
from attnviz.figures import patching as fig
from attnviz.figures.numbers import signed
from attnviz.figures.style import WARNING, axis_label
from attnviz.ui.machinery.runner import failure
from attnviz.ui.panels.patching_maps import PatchMap, PatternPair
from attnviz.ui.views.fields import fill, plain_label

CHECK_MS = 200  # the lengths are checked this long after the last keystroke in either box
LAST, POSITION_MAX = -1, 99_999  # the position box: -1 reads "last token" (any text's last)
ELIDE = 60  # characters of a text quoted in the stale line
SHOWN = 2000  # characters of the clean text shown (a word-wrapped label lays out all it is given)


def _say(label: QLabel, text: str) -> None:
    """A line that takes no room while it is empty."""
    label.setText(text)
    label.setVisible(bool(text))


def _quote(text: str) -> str:  # a text in the stale line: quoted, cut as an axis cuts a token
    return "\u201c" + axis_label(text, ELIDE) + "\u201d"


def _shown(text: str) -> str:  # the clean text as the panel shows it: a long paste cut, with its size
    return text if len(text) <= SHOWN else f"{text[:SHOWN]}… ({len(text):,} characters)"


def _id_text(token: int | None) -> str:  # a token as the Target and Alt boxes take an id
    return "" if token is None else f"#{token}"


def _step_line(was, now) -> str:
    """That the map is of another training step than the model shown ('' where it is not)."""
    a, b = checkpoint_record(was), checkpoint_record(now)
    if was is now or a is None or b is None:
        return ""
    return (f"Shown for training step {a['step']:,}; the model is at step {b['step']:,} now: "
            "Run computes it for that step.")


def _sentence(text: str) -> str:  # (str.capitalize would lower the swapped names)
    return text[:1].upper() + text[1:]


class PatchingPanel(QWidget):
    def __init__(self, state, jobs, parent: QWidget | None = None):
        super().__init__(parent)
        self.state, self.jobs = state, jobs
        self.shown = False  # the tab in sight (a head clicked here leaves it up)
        self._labels = None  # the clean text's token labels, once tokenised (the position's readout)
        self._clean = (None, None, None)  # (model, text, the text tokenised: Lengths.clean)
        self._swap = ("", "", "")  # (clean text, corrupted text, Corrupt's line about them)
        self._build()
        self._lay_out()
        self._check = QTimer(self)
        self._check.setSingleShot(True)
        self._check.setInterval(CHECK_MS)
        self._check.timeout.connect(self.check_lengths)
        self._unchecked = False  # texts changed while the tab was hidden: checked when it shows
        self.corrupt_box.textChanged.connect(self._on_corrupt)
        state.sigTextChanged.connect(self._on_text)
        state.sigModelChanged.connect(lambda _m: self._on_model())
        state.sigWeightsChanged.connect(lambda _m: self._show_stale())  # another training step
        state.sigFocusChanged.connect(self._on_focus)
        state.sigDisplayChanged.connect(self._on_display)
        self.what_box.currentTextChanged.connect(lambda _t: self._sync_layer())
        self.position_box.valueChanged.connect(lambda _v: self._say_position())
        for changed in (self.what_box.currentTextChanged, self.direction_box.currentTextChanged,
                        self.layer_box.valueChanged, self.position_box.valueChanged,
                        self.target_edit.textChanged, self.alt_edit.textChanged):
            changed.connect(lambda *_: self._on_box())  # (a setting unlike the map's dims it)
        jobs.sigChanged.connect(self.refresh)
        jobs.sigProgress.connect(self._on_progress)
        self._on_model()

    def _build(self) -> None:
        from attnviz.engine.analysing.patching import DIRECTIONS, WHATS

        self.clean_label = plain_label(QLabel())  # (the user's text)
        self.clean_label.setWordWrap(True)
        self.corrupt_box = QLineEdit()
        self.corrupt_box.setPlaceholderText("The corrupted text (same number of tokens)")
        self.corrupt_button = QPushButton("Corrupt")
        self.corrupt_button.setToolTip("Propose a corrupted text: a name or a repeated word swapped for "
                                       "a word of the same token length")
        self.corrupt_button.clicked.connect(self.propose)
        self.swapped = plain_label(QLabel())
        self.swapped.setWordWrap(True)
        self.swapped.hide()
        self.target_edit, self.alt_edit = QLineEdit(), QLineEdit()
        for edit, empty in ((self.target_edit, "the clean top-1"),
                            (self.alt_edit, "the corrupted top-1 (its 2nd if the same)")):
            edit.setPlaceholderText(empty)  # (and the rule for what is typed, on hover)
            edit.setToolTip(f"A token: {TOKEN_RULE}. Empty: {empty}.")
        self.position_box = QSpinBox()  # P: -1 is the last token, whatever the text's length
        self.position_box.setRange(LAST, POSITION_MAX)
        self.position_box.setSpecialValueText("last token")
        self.position_box.setValue(LAST)
        self.position_box.setToolTip("The position P whose next-token logits the metric reads "
                                     "(attnviz patch --position)")
        self.position_label = plain_label(QLabel())  # (it quotes a token label)
        self.position_label.setWordWrap(True)
        self.what_box = QComboBox()
        self.what_box.addItems(list(WHATS))
        self.what_box.setCurrentText("head_out")
        self.layer_box = QSpinBox()
        self.layer_box.setPrefix("layer ")
        self.direction_box = QComboBox()
        self.direction_box.addItems(list(DIRECTIONS))
        self.run_button, self.cancel_button = QPushButton("Run"), QPushButton("Cancel")
        self.run_button.clicked.connect(self.run)
        self.cancel_button.clicked.connect(lambda: self.jobs.cancel())
        self.export_button = QPushButton("Export\u2026")
        self.export_button.setToolTip("The map as PNG or SVG (with a JSON sidecar that File \u25b8 Open "
                                      "view restores); the numbers as JSON (attnviz patch's keys) or CSV")
        self.export_button.clicked.connect(self.export_dialog)
        self.progress = QProgressBar()
        self.progress.setFormat("Patched runs: %v of %m")
        self.progress.hide()
        self.note, self.stale = plain_label(QLabel()), plain_label(QLabel())  # (they quote texts)
        for label in (self.note, self.stale):
            label.hide()
            label.setWordWrap(True)
        self.stale.setStyleSheet(f"color: {WARNING}")
        self.aligned = plain_label(QLabel())  # (the two texts' tokens, aligned)
        self.aligned.hide()
        self.aligned.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.aligned.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.sides_label = plain_label(QLabel())  # (it quotes token labels)
        self.sides_label.setWordWrap(True)
        self.sides_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.map = PatchMap(self.pick_head)
        self.patterns = PatternPair(self)
        self.refused = plain_label(QLabel())  # why the model cannot be patched (it names the model)
        self.refused.setObjectName("patching_refused")
        self.refused.setWordWrap(True)
        self.refused.setStyleSheet(f"color: {WARNING}")
        self.refused.hide()

    def _lay_out(self) -> None:
        # one field a row and the controls in two rows: the tab fits the dock's first-start width
        # (440 px), where a row of six controls or Target and Alt side by side ran off its edge
        form = QGridLayout()
        form.addWidget(plain_label(QLabel("Clean:")), 0, 0)
        form.addWidget(self.clean_label, 0, 1, 1, 2)
        form.addWidget(plain_label(QLabel("Corrupted:")), 1, 0)
        form.addWidget(self.corrupt_box, 1, 1)
        form.addWidget(self.corrupt_button, 1, 2)
        form.addWidget(self.swapped, 2, 1, 1, 2)  # what Corrupt swapped, under the box it filled
        form.addWidget(plain_label(QLabel("Target:")), 3, 0)
        form.addWidget(self.target_edit, 3, 1, 1, 2)
        form.addWidget(plain_label(QLabel("Alt:")), 4, 0)
        form.addWidget(self.alt_edit, 4, 1, 1, 2)
        form.addWidget(plain_label(QLabel("Position:")), 5, 0)
        at = QHBoxLayout()
        at.addWidget(self.position_box, 0, Qt.AlignmentFlag.AlignTop)
        at.addWidget(self.position_label, 1)
        form.addLayout(at, 5, 1, 1, 2)
        form.setColumnStretch(1, 1)
        what = QHBoxLayout()
        for wdg in (self.what_box, self.layer_box, self.direction_box):
            what.addWidget(wdg)
        what.addStretch(1)
        row = QHBoxLayout()
        for wdg in (self.run_button, self.cancel_button):
            row.addWidget(wdg)
        row.addStretch(1)
        row.addWidget(self.export_button)
        col = QVBoxLayout(self)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.refused)
        col.addLayout(form)
        col.addLayout(what)
        col.addLayout(row)
        col.addWidget(self.progress)
        col.addWidget(self.note)
        col.addWidget(self.aligned)
        col.addWidget(self.stale)
        col.addWidget(self.sides_label)
        col.addWidget(self.map, 3)
        col.addWidget(self.patterns, 2)

    # --- input ------------------------------------------------------------------------------------
    def _on_text(self, text: str) -> None:
        self.clean_label.setText(_shown(text))
        self._say_swap()
        self._check_soon()
        self._on_box()

    def boxes(self) -> tuple:
        """What Run asks for, as the boxes hold it now (PatchJobs.run's arguments)."""
        return (self.state.text, self.corrupt_box.text(), self.what_box.currentText(), self.layer_box.value(),
                self.direction_box.currentText(), self.target_edit.text(), self.alt_edit.text(), self.position())

    def _on_box(self) -> None:
        """A box changed: the last Run's note goes once its boxes have changed (the check of the
        two texts' lengths says its line again where it still holds), and the map dims."""
        if self.jobs.forget_note(self.boxes()):
            self._check_soon()
        self._show_stale()

    def _check_soon(self) -> None:  # (a hidden tab's check waits: a keystroke tokenises its text once)
        self._unchecked = not self.shown
        if self.shown:
            self._check.start()

    def set_shown(self, shown: bool) -> None:
        """The tab in sight or not (its dock's visibilityChanged); texts changed meanwhile are checked."""
        self.shown = bool(shown)
        if self.shown and self._unchecked:
            self._check_soon()

    def _on_corrupt(self, _text: str) -> None:
        self._say_swap()
        self._check_soon()
        self._on_box()

    def _on_model(self) -> None:
        m = self.state.model
        self._clean = (None, None, None)  # (it holds the model before: a hidden tab checks nothing)
        self.layer_box.setRange(0, max(0, (m.config.n_layer - 1) if m is not None else 0))
        self.clean_label.setText(_shown(self.state.text))
        why = self.refusal()
        _say(self.refused, why)
        for control in (self.corrupt_box, self.corrupt_button, self.target_edit, self.alt_edit,
                        self.position_box, self.what_box, self.direction_box, self.run_button):
            control.setEnabled(not why)
        self._sync_layer()
        self._say_position()
        self._check_soon()
        self.refresh()

    def refusal(self) -> str:
        """Why the model cannot be patched, said up front as What heads do and Generate say it ('' where
        it can): an encoder predicts no next token, and patching measures how a prediction moves."""
        m = self.state.model
        if m is None or m.config.causal:
            return ""
        return (f"{m.name} is an encoder, so it predicts no next token, and patching measures how the "
                "prediction of the next token changes. Open a decoder from the Models menu to patch one.")

    def _sync_layer(self) -> None:
        self.layer_box.setEnabled(self.what_box.currentText() == "head_out_by_pos" and not self.refusal())

    def position(self) -> int | None:
        """P as asked: None for the last token."""
        v = self.position_box.value()
        return None if v == LAST else v

    def _say_position(self) -> None:
        """The clean token at P beside the box, or that P is outside the text."""
        labels, v = self._labels, self.position_box.value()
        if labels is None or self.refusal():  # (an encoder scores no next token)
            self.position_label.setText("")
            return
        T = len(labels)
        if v >= T:
            self.position_label.setText(f"outside the {tokens(T)} (0..{T - 1})")
            return
        P = T - 1 if v == LAST else v
        self.position_label.setText(f"P = {P} {quoted(labels[P])}: the next token after it is scored")

    def propose(self) -> None:
        from attnviz.engine.analysing.patching import propose_corrupt
        from attnviz.engine.errors import InputError, ModelFileChanged

        if self.state.model is None or self.refusal():
            return
        try:
            proposal = propose_corrupt(self.state.model, self.state.text)
        except (InputError, ModelFileChanged) as exc:  # (a GGUF's whole vocabulary is read from its file)
            self._swap = (self.state.text, self.corrupt_box.text(), str(exc))
            self._say_swap()
            return
        self._swap = (self.state.text, proposal.text, _sentence(proposal.describe()))
        fill(self.corrupt_box, proposal.text)
        self._say_swap()

    def _say_swap(self) -> None:
        """Corrupt's line (what it swapped, or why it could not) while both texts are the ones it
        spoke of: a corrupted text typed or opened since is not the swap it describes."""
        clean, corrupt, line = self._swap
        _say(self.swapped, line if (clean, corrupt) == (self.state.text, self.corrupt_box.text()) else "")

    def check_lengths(self) -> None:
        """The clean token at P; one line with both lengths and the aligned tokens when the two texts
        differ in length. The texts are tokenised on a job; the newest check's answer is shown."""
        from attnviz.ui.machinery import patch_jobs as P

        m, text, corrupt = self.state.model, self.state.text, self.corrupt_box.text()
        both = corrupt if not self.jobs.running else ""
        known = self._clean[2] if self._clean[0] is m and self._clean[1] == text else None
        self.jobs.worker.submit(P.CHECK_KIND, lambda: P.check_lengths(m, text, both, known),
                                self._on_checked, (m, text, corrupt))

    def _on_checked(self, request, value, error) -> None:
        m, text, corrupt = request
        if error is not None or m is not self.state.model or (text, corrupt) != (self.state.text,
                                                                               self.corrupt_box.text()):
            return  # a newer check is coming (an error here is one the run reports too)
        self._labels = value.labels
        self._clean = (m, text, value.clean)  # (a check of another corrupted text reuses it)
        _say(self.aligned, value.aligned)
        self._say_position()
        if value.note is not None and not self.jobs.running:
            _say(self.note, value.note)
        elif self.note.text().startswith("the clean text is "):
            _say(self.note, "")

    def run(self) -> bool:
        return self.jobs.run(*self.boxes())

    # --- state -> widgets ---------------------------------------------------------------------------
    def refresh(self) -> None:
        j = self.jobs
        self.progress.setVisible(j.running)
        if j.running and j.progress[1] == 0:
            self.progress.setRange(0, 0)  # busy until the two runs are made
        self.cancel_button.setEnabled(j.running)
        _say(self.note, j.note)
        _say(self.aligned, j.aligned)
        self.sides_label.setText(self.sides_text())
        self.map.set_view(self.view())
        self.export_button.setEnabled(self.map.view is not None)
        self.patterns.update()
        self._show_stale()

    def stale_line(self) -> str:
        """What the map and predictions shown were computed for, where it has changed since ('' when
        they are what the boxes and the model ask, or nothing is shown): the training step, the
        texts, then the settings."""
        a = self.jobs.ask
        if a is None or (self.jobs.result is None and self.jobs.sides is None):
            return ""
        changed = [name for name, was, now in (("clean", a.clean, self.state.text),
                                               ("corrupted", a.corrupt, self.corrupt_box.text())) if was != now]
        line = _step_line(a.model, self.state.model)
        if changed:
            texts = "texts have" if len(changed) == 2 else "text has"
            line += (" " if line else "") + (
                f"Shown for the clean text {_quote(a.clean)} and the corrupted text {_quote(a.corrupt)}. "
                f"The {' and the '.join(changed)} {texts} changed since: Run computes it for the new ones.")
        settings = [name for name, was, now in (
            ("what to patch", a.what, self.what_box.currentText()),
            ("layer", a.layer if a.what == "head_out_by_pos" else None,
             self.layer_box.value() if self.what_box.currentText() == "head_out_by_pos" else None),
            ("direction", a.direction, self.direction_box.currentText()),
            ("position", a.position_asked, self.position()),
            ("target", a.target_text.strip(), self.target_edit.text().strip()),
            ("alt", a.alt_text.strip(), self.alt_edit.text().strip())) if was != now]
        if settings:
            names = ", ".join(settings[:-1]) + (" and " if len(settings) > 1 else "") + settings[-1]
            line += (" " if line else "") + (
                f"Shown for {a.what} ({a.direction}) at {a.position}: the {names} "
                f"{'have' if len(settings) > 1 else 'has'} changed since: Run computes it for them.")
        return line

    def _show_stale(self) -> None:
        """Dims the map, the patterns and the predictions of texts or settings no longer in the boxes."""
        line = self.stale_line()
        _say(self.stale, line)
        self.sides_label.setEnabled(not line)
        for canvas in (self.map, self.patterns):
            if canvas.dim != bool(line):
                canvas.dim = bool(line)
                canvas.update()

    def _on_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(total, 1))
        self.progress.setValue(done)

    def sides_text(self) -> str:
        s = self.jobs.sides
        if s is None:
            return ""
        m = s.metric
        return (f"At {m.position}: clean top-1 {quoted(s.top_clean)}, corrupted top-1 {quoted(s.top_corrupt)}. "
                f"diff = logit({quoted(s.target_text)}) \u2212 logit({quoted(s.alt_text)}): clean {signed(m.diff_clean)}, "
                f"corrupted {signed(m.diff_corrupt)}")

    def view(self) -> fig.PatchView | None:
        j, st = self.jobs, self.state
        if j.result is None or j.sides is None or j.ask is None:
            return None
        a = j.ask
        return fig.patch_view(j.result, st.model_name, a.tokens_clean, a.tokens_corrupt, j.sides.target_text,
                              j.sides.alt_text, a.layer, a.model.kv_group, st.focus, a.clean, a.corrupt,
                              {"layer": st.layer, "head": st.focus[1] if st.focus and st.focus[0] == st.layer else None,
                               "colormap": st.colormap, "scale_mode": st.scale_mode, "hide_first": st.hide_first,
                               "patch_position": a.position_asked, "patch_target": _id_text(a.target),
                               "patch_alt": _id_text(a.alt)},
                              (a.labels_clean, a.labels_corrupt), checkpoint_record(a.model))

    def pick_head(self, layer: int, head: int) -> None:
        """Its pattern on both texts, and the head focused in the grid."""
        self.patterns.head = (layer, head)
        self.patterns.update()
        self.state.show_head(layer, head)

    def _on_display(self) -> None:
        """The colormap (the patterns' colours, the no-value colour of a cell not run) and what the
        sidecar records of the window's view may have changed."""
        if self.map.view is not None:
            self.map.set_view(self.view())
        self.patterns.update()

    def _on_focus(self, focus) -> None:
        if self.map.view is not None and self.map.view.focus != focus:
            from dataclasses import replace

            self.map.set_view(replace(self.map.view, focus=focus))

    def restore(self, view: dict) -> None:
        """What an exported view's sidecar records: the corrupted text, what was patched, the position
        and the target and alt as asked."""
        fill(self.corrupt_box, str(view.get("corrupt") or ""))
        if "patch_position" in view:
            at = view["patch_position"]
            self.position_box.setValue(at if isinstance(at, int) and 0 <= at <= POSITION_MAX else LAST)
        for key, edit in (("patch_target", self.target_edit), ("patch_alt", self.alt_edit)):
            if key in view:
                fill(edit, str(view[key] or ""))
        if view.get("what") in [self.what_box.itemText(i) for i in range(self.what_box.count())]:
            self.what_box.setCurrentText(view["what"])
        if view.get("direction") in ("denoise", "noise"):
            self.direction_box.setCurrentText(view["direction"])
        if isinstance(view.get("patch_layer"), int):
            self.layer_box.setValue(view["patch_layer"])

    # --- export -------------------------------------------------------------------------------------
    def export_dialog(self) -> None:
        from attnviz.ui.export import export_folder, remember_folder

        path, _ = QFileDialog.getSaveFileName(
            self, "Export the patching map", str(export_folder() / "patching.png"),
            "PNG image (*.png);;SVG image (*.svg);;Numbers (*.json);;Map (*.csv)")
        if path:
            try:
                self.export(path)
            except Exception as exc:  # noqa: BLE001  (one line in the tab; the app goes on)
                _say(self.note, failure(f"Could not export {path}", str(exc)))
                return
            remember_folder(path)

    def export(self, path, width: int | None = None):
        from attnviz.figures.panel_export import export_figure

        return export_figure(fig, self.map.view, path, width or max(480, self.map.width()),
                             self.state.model_path)


def install(window) -> None:
    """The Patching tab beside the other panels (the window calls this once it builds its panels)."""
    from attnviz.ui.machinery.patch_jobs import PatchJobs

    window.patch_jobs = PatchJobs(window.state, window.worker, window)
    from PySide6.QtWidgets import QFrame, QScrollArea

    window.patching_panel = PatchingPanel(window.state, window.patch_jobs)
    scroll = QScrollArea()  # (the tab's form and two maps must not raise the window's least height)
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(window.patching_panel)
    window.patching_dock = dock = window.add_panel_dock("Patching", "patching_dock", scroll)
    dock.visibilityChanged.connect(window.patching_panel.set_shown)
    window.patching_panel.set_shown(dock.isVisible() and not dock.visibleRegion().isEmpty())
