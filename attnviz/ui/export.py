"""File -> Export and File -> Open view in the window: the dialog (the writing is figures.write:
figures as PNG or SVG, and numbers as NPY, CSV or JSON, of the focus head, the current layer or all
layers; each image gets a JSON sidecar), the folder new exports start in, and applying a sidecar's
view (figures.data.open_sidecar reads it) to the state.

    ExportDialog(state, parent=None, settings=None)  # the dialog the window opens
    export_folder(settings=None) -> Path             # where the last export went, else Pictures
    apply_view(state, view) -> str | None            # all of a view, or nothing and why
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QSettings, QStandardPaths, Qt
from PySide6.QtWidgets import (
    QApplication, QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout,
    QHBoxLayout, QLabel, QLineEdit, QPushButton, QSpinBox, QVBoxLayout, QWidget,
)

from attnviz.engine.reading.token_text import tokens
from attnviz.engine.analysing.effects import window_run
from attnviz.engine.computing.checkpoints import checkpoint_record
from attnviz.engine.errors import AttnvizError, InputError
from attnviz.engine.computing.patterns import SCALE_MODES, SCOPES, check_index, head_title
from attnviz.figures import anatomy as anatomy_figure
from attnviz.figures.anatomy import AnatomyView
from attnviz.figures.data import (
    COLORMAPS, DEFAULT_WIDTH, FORMATS, IMAGE_FORMATS, MAX_WIDTH, MIN_WIDTH, NOTHING_YET, ExportError,
    named_path,
)
from attnviz.figures.style import ERROR, WARNING
from attnviz.figures.write import export_result, export_view
from attnviz.ui.views.grid_compare import compared_mode
from attnviz.ui.views.notices import sentence
from attnviz.ui.machinery.settings import app_settings, export_choices, remember_export
from attnviz.ui.machinery.state import VIEW_MODES
from attnviz.ui.machinery.runner import describe_error, failure
from attnviz.engine.computing.request import RunRequest
from attnviz.ui.views.fields import plain_label

log = logging.getLogger(__name__)
SCOPE_NAMES = {"head": "Focus head", "layer": "Current layer (all heads)", "all": "All layers",
               "anatomy": "Anatomy of the current layer (PNG, SVG)",
               "prediction": "Next-token prediction (What heads do)",
               "lens": "Logit lens (What heads do)", "dla": "Direct logit attribution (What heads do)"}
EFFECT_VIEWS = ("prediction", "lens", "dla")
FORMAT_NAMES = {"png": "PNG image", "svg": "SVG vector image", "npy": "NumPy array (.npy)",
                "csv": "CSV table", "json": "JSON (tokens, ids, weights)"}


def anatomy_view(state) -> AnatomyView:
    """The Anatomy figure of the window's layer, its focused head lit. A result that kept no layer
    inputs (the tab was hidden) is run again for them, in full and off the KV cache."""
    r, model = state.result, state.model
    if r is None or model is None:
        raise ExportError(NOTHING_YET)
    if r.layer_inputs is None:
        r = _run_again(model, r, state.effects.changed_by(r), inputs=True)
    focus = state.focus
    head = focus[1] if focus is not None and focus[0] == state.layer else None
    return anatomy_figure.make_anatomy_view(model, r, state.layer, head, state.colormap)


def effects_view(state, kind: str):
    """The What heads do panel's `kind` view (prediction, lens, dla) as shown, with the window's
    layer, focus and heatmap options for its sidecar."""
    from attnviz.figures.effects import effects_view as make

    eff, r = state.effects, state.result
    if r is None or state.model is None:
        raise ExportError(NOTHING_YET)
    analysis = eff.analysis_of(r) or _analyse_now(state)
    layer, head = state.focus if state.focus is not None else (state.layer, None)
    return make(kind, analysis, model=state.model_name, result=r, kv_group=r.kv_group,
                typed=(eff.target, eff.alt), checkpoint=checkpoint_record(state.model),
                display={"layer": layer, "head": head, "scope": "head" if head is not None else "layer",
                         "view_mode": state.view_mode, "colormap": state.colormap,
                         "scale_mode": state.scale_mode, "hide_first": state.hide_first,
                         "value_weighted": state.value_weighted})


def _analyse_now(state):
    """The prediction, lens and DLA of the window's text, query, typed tokens and ablation, run
    here: the panel's own analysis is of an earlier text when the text changed while it was hidden."""
    from attnviz.engine.analysing.effects import window_run
    from attnviz.ui.machinery.effects_jobs import analyse_typed

    eff, r, model = state.effects, state.result, state.model
    if not model.config.causal:
        raise ExportError(eff.note or f"{state.model_name} predicts no next token: the prediction, "
                                      "lens and DLA need a causal language model")
    run = eff.run_of(r)
    if run is None or run.ablation != eff.ablation:
        run = window_run(model, r.text, ids=None if r.text else r.input_ids, ablation=eff.ablation)
    return analyse_typed(model, run, state.query_pos, eff.target, eff.alt)[0]


def _changed_stem(ablation) -> str:
    """What a changed run switched off, for a file name: zero-ablated-L3H1-L5H0_knocked-out-7to3."""
    parts = []
    if ablation.heads:
        parts.append(f"{ablation.mode}-ablated-" + "-".join(f"L{l}H{h}" for l, h in ablation.heads))
    if ablation.knockouts:
        parts.append("knocked-out-" + "-".join(f"{q}to{k}" for _, q, k in ablation.knockouts))
    return "_".join(parts)


def _with_values(state):
    """The window's result with its value norms: run again for them (in full, off the KV cache)
    when the Value-weighted view was off and the result has none; a changed run is run again
    with its edits."""
    r, model = state.result, state.model
    if r is None or model is None or r.value_norms is not None:
        return r
    return _run_again(model, r, state.effects.changed_by(r), values=True)


def _run_again(model, r, ablation=None, **wanted):
    """Result `r` run again in full, off the KV cache (the window's runner may be using it), for
    what it did not keep (`inputs=True`, `values=True`); under `ablation` (what `r` is a changed
    run of) the changed run again."""
    if ablation is not None:
        request = RunRequest(truncate=r.truncated, use_cache=False, **wanted)
        return window_run(model, r.text, ids=None if r.text else r.input_ids, request=request,
                          ablation=ablation).result
    if r.text:
        return model.run(r.text, request=RunRequest(truncate=r.truncated, use_cache=False, **wanted))
    return model.run(ids=r.input_ids, request=RunRequest(use_cache=False, **wanted))


def nothing_to_export(state) -> str:
    """Why the dialog has nothing to write: no run yet, or a long text, whose patterns are never
    held whole (the long view computes the regions it shows)."""
    run = state.long.run
    if run is not None:
        return (f"The text is long ({tokens(run.patterns.T)}): its patterns are computed only for "
                "what the long view shows, never whole, so there is nothing to export here. The long "
                "view's Export picture… writes it as shown; attnviz attention --layer L --rows A:B "
                "writes a layer's block of query rows.")
    return sentence(NOTHING_YET.capitalize())


def default_folder() -> Path:
    """The user's Pictures folder if it exists, else the home folder."""
    pictures = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.PicturesLocation)
    return Path(pictures) if pictures and Path(pictures).is_dir() else Path.home()


def export_folder(settings: QSettings | None = None) -> Path:
    """The folder of the last export while it exists, else the user's Pictures folder, else home;
    never the working directory the app was started from. New exports and File → Open view
    start here."""
    settings = settings if settings is not None else app_settings()
    saved = Path(export_choices(settings)["folder"] or ".")
    return saved if saved.is_absolute() and saved.is_dir() else default_folder()


def remember_folder(path, settings: QSettings | None = None) -> None:
    """A panel's export was written to `path`: the next export starts in its folder, as after the
    Export dialog's."""
    settings = settings if settings is not None else app_settings()
    settings.setValue("export/folder", str(Path(path).resolve().parent))


# --- sidecar views: File -> Open view restores what an export recorded -------------------------
def view_problem(state, view: dict) -> str | None:
    """Why a view cannot be shown on the state's model (a layer or head it does not have, a
    colormap, scale or view mode attnviz does not know), or None when it can."""
    if state.model is None:
        return "no model is loaded"
    name = state.model_name
    try:
        if view.get("layer") is not None:
            check_index("layer", int(view["layer"]), state.n_layer, owner=name)
            if view.get("head") is not None:
                check_index("head", int(view["head"]), state.n_head, owner=name, per=" per layer")
    except InputError as exc:
        return str(exc)
    for key, known in (("colormap", COLORMAPS), ("scale_mode", SCALE_MODES), ("view_mode", VIEW_MODES)):
        if view.get(key) is not None and view[key] not in known:  # (shown as recorded, or not at all)
            return f"the view's {key} {view[key]!r} is not one of attnviz's ({', '.join(known)})"
    return None


def apply_view(state, view: dict) -> str | None:
    """Show a view on `state`, all of it, or nothing of it and return why."""
    problem = view_problem(state, view)
    if problem is not None:
        return problem
    try:
        ablation = _ablation_of(state, view)
    except InputError as exc:
        return str(exc)
    if view.get("text") is not None:
        state.set_text(str(view["text"]))
    if view.get("colormap") in COLORMAPS:
        state.set_colormap(view["colormap"])
    if view.get("scale_mode") in SCALE_MODES:
        state.set_scale_mode(view["scale_mode"])
    if view.get("hide_first") is not None:
        state.set_hide_first(bool(view["hide_first"]))
    if view.get("value_weighted") is not None:
        state.set_value_weighted(bool(view["value_weighted"]))
    if view.get("view_mode") in VIEW_MODES:
        state.set_view_mode(view["view_mode"])
    if view.get("layer") is not None:
        state.set_layer(int(view["layer"]))
        if view.get("head") is not None:
            state.show_head(int(view["layer"]), int(view["head"]))
    if ablation is not None:
        _apply_effects(state, view, ablation)
    ck = view.get("checkpoint")  # a model with training checkpoints: the step the view shows
    if isinstance(ck, dict) and isinstance(ck.get("index"), int) and not isinstance(
            ck["index"], bool):
        state.request_checkpoint(ck["index"])
    return None


def _ablation_of(state, view: dict):
    """The ablation a What heads do view records (checked against the model: InputError), or None
    for another view."""
    from attnviz.engine.analysing.effects import CLEAN, Ablation

    if view.get("view") not in EFFECT_VIEWS and "ablation" not in view:
        return None
    return CLEAN if view.get("ablation") is None else Ablation.from_json(
        view["ablation"], state.n_layer, state.n_head)


def _apply_effects(state, view: dict, ablation) -> None:
    """A What heads do view's part: the ablation, the typed tokens and the query position (set
    once the view's text has its result)."""
    eff = state.effects
    eff.set_ablation(ablation)
    typed = view.get("typed")
    if isinstance(typed, dict):
        eff.set_tokens(str(typed.get("target", "")), str(typed.get("alt", "")))
    pos = view.get("position")
    if isinstance(pos, int) and not isinstance(pos, bool) and pos >= 0:
        eff.query_when(str(view.get("text", state.text)), pos)


class ExportDialog(QDialog):
    """Choose what to export (focus head, current layer, all layers), the format, the width and
    the file; writes on Export and shows the reason in the dialog when it fails."""

    def __init__(self, state, parent: QWidget | None = None, settings: QSettings | None = None,
                 compare=None):
        """`settings`: the window's (where the last export's folder, format and width are kept);
        `compare`: the window's Compare session (ui/machinery/compare_jobs.py), whose grid may show
        B or A − B, which the export does not write."""
        super().__init__(parent)
        self.state, self.compare = state, compare
        self.setWindowTitle("Export")
        self.settings = settings if settings is not None else app_settings()
        self.written: list[Path] = []

        self.scope = QComboBox()
        for key, name in SCOPE_NAMES.items():
            self.scope.addItem(name, key)
        self.scope.setToolTip("Which heads to export")
        self.format = QComboBox()
        for key, name in FORMAT_NAMES.items():
            self.format.addItem(name, key)
        self.format.setToolTip("Images get a .json sidecar that File \u2192 Open view restores")
        self.width_box = QSpinBox()
        self.width_box.setRange(MIN_WIDTH, MAX_WIDTH)
        self.width_box.setSingleStep(100)
        self.width_box.setSuffix(" px")
        self.width_box.setToolTip("Image width in pixels (3000 px prints ~25 cm wide at 300 dpi)")
        self.scale = QComboBox()
        self.scale.addItem("Shared (0 \u2026 the run's largest weight, every layer and head)", "shared")
        self.scale.addItem("Per head (0 \u2026 each head's max)", "per-head")
        self.hide_first = QCheckBox("Hide the first-token column and renormalise rows")
        self.value_weighted = QCheckBox("Value-weighted: each weight times \u2016v W_O\u2016, rows renormalised")
        self.value_weighted.setToolTip("What the window's Value-weighted view shows: a key counts by "
                                       "what it sends through the head, not only by its weight")
        self.path_edit = QLineEdit()
        self.path_edit.setMinimumWidth(380)
        self.path_edit.setToolTip("File to write; the extension picks the format (a name without one "
                                  "gets the chosen format's)")
        browse = QPushButton("Browse\u2026")
        browse.clicked.connect(self.browse)
        path_row = QHBoxLayout()
        path_row.addWidget(self.path_edit, 1)
        path_row.addWidget(browse)
        self.error = plain_label(QLabel())  # (an error may quote a path)
        self.error.setWordWrap(True)
        self.error.setStyleSheet(f"color: {ERROR};")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.hide()

        form = QFormLayout()
        form.addRow("Export", self.scope)
        form.addRow("Format", self.format)
        form.addRow("Width", self.width_box)
        form.addRow("Colour scale", self.scale)
        form.addRow("", self.hide_first)
        form.addRow("", self.value_weighted)
        form.addRow("File", path_row)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.export_button = self.buttons.addButton("Export",
                                                    QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.accepted.connect(self.do_export)
        self.buttons.rejected.connect(self.reject)
        box = QVBoxLayout(self)
        box.addLayout(form)
        self.note = plain_label(QLabel())  # what the export writes where it is not what the grid shows
        self.note.setWordWrap(True)
        self.note.setStyleSheet(f"color: {WARNING};")
        self.note.hide()
        box.addWidget(self.note)
        box.addWidget(self.error)
        box.addWidget(self.buttons)

        self._load_choices()
        self.format.currentIndexChanged.connect(self._format_changed)
        self.scope.currentIndexChanged.connect(self._scope_changed)
        self.path_edit.textEdited.connect(self._path_edited)
        self._scope_changed()
        self._format_changed()

    # --- choices --------------------------------------------------------------------------------
    def _load_choices(self) -> None:
        st = self.state
        has_focus = st.focus is not None
        item = self.scope.model().item(0)
        item.setEnabled(has_focus)
        if not has_focus:
            item.setToolTip("Click a head first to choose the focus head")
        default = "head" if has_focus else ("all" if st.view_mode == "all" else "layer")
        last = export_choices(self.settings)
        scope = last["scope"] or default
        if scope == "head" and not has_focus:
            scope = "layer"
        self.scope.setCurrentIndex(max(0, self.scope.findData(scope)))
        self.format.setCurrentIndex(max(0, self.format.findData(last["format"])))
        self.width_box.setValue(last["width"] or DEFAULT_WIDTH)
        self.scale.setCurrentIndex(max(0, self.scale.findData(st.scale_mode)))
        self.hide_first.setChecked(bool(st.hide_first))
        self.value_weighted.setChecked(bool(st.value_weighted))
        self.export_button.setEnabled(st.result is not None)
        if st.result is None:
            self.show_error(nothing_to_export(st))
        self._suggest_name()

    def folder(self) -> Path:
        """Where a new export goes (export_folder)."""
        return export_folder(self.settings)

    def _suggest_name(self) -> None:
        st = self.state
        scope = self.scope.currentData()
        model = (st.model_name or "model").replace("/", "_")
        ck = checkpoint_record(st.model)  # the training checkpoint shown, None without
        if ck is not None:
            model += f"_step{ck['step']}"
        if scope == "head" and st.focus is not None:
            stem = f"{model}_" + head_title(*st.focus).replace(" ", "")  # model_L3H1
        elif scope == "layer":
            stem = f"{model}_L{st.layer}"
        elif scope == "anatomy":
            stem = f"{model}_L{st.layer}_anatomy"
        elif scope in EFFECT_VIEWS:
            stem = f"{model}_{scope}"
        else:
            stem = f"{model}_all"
        off = st.effects.changed_by(st.result) if scope in SCOPES else None
        if off is not None:  # the numbers of a changed run (.npy holds no header to say it)
            stem += "_" + _changed_stem(off)
        current = self.path_edit.text().strip()
        folder = Path(current).parent if current else self.folder()
        self.path_edit.setText(str(folder / f"{stem}.{self.format.currentData()}"))

    def _show_note(self) -> None:
        """While Compare's grid shows B or A − B, say that a heatmap export is of model A."""
        mode = compared_mode(self.compare)
        heatmap = self.scope.currentData() in SCOPES
        text = "" if mode == "A" or not heatmap else (
            f"The grid shows {'B' if mode == 'B' else 'A − B'} (Compare); the export writes model A's "
            f"weights ({self.state.model_name}), as the grid's A shows them.")
        self.note.setText(text)
        self.note.setVisible(bool(text))

    def _scope_changed(self) -> None:
        """The anatomy is a figure only (PNG, SVG) and knows no heatmap options: the dialog offers
        what the scope can export, and moves an image format in when a number format was chosen."""
        self._show_note()
        anatomy = self.scope.currentData() == "anatomy"
        for i in range(self.format.count()):
            self.format.model().item(i).setEnabled(not anatomy or self.format.itemData(i) in IMAGE_FORMATS)
        for box in (self.scale, self.hide_first, self.value_weighted):
            box.setEnabled(not anatomy and self.scope.currentData() not in EFFECT_VIEWS)
        if anatomy and self.format.currentData() not in IMAGE_FORMATS:
            self.format.setCurrentIndex(self.format.findData("png"))  # (-> _format_changed: the name)
        self._suggest_name()

    def _format_changed(self) -> None:
        fmt = self.format.currentData()
        self.width_box.setEnabled(fmt in IMAGE_FORMATS)
        text = self.path_edit.text().strip()
        if text:
            p = Path(text)
            self.path_edit.setText(str(p.with_suffix("." + fmt)) if p.suffix else text + "." + fmt)

    def _path_edited(self, text: str) -> None:
        ext = Path(text).suffix.lower().lstrip(".")
        if ext in FORMATS and ext != self.format.currentData():
            self.format.blockSignals(True)
            self.format.setCurrentIndex(self.format.findData(ext))
            self.format.blockSignals(False)
            self.width_box.setEnabled(ext in IMAGE_FORMATS)

    def browse(self) -> None:
        fmt = self.format.currentData()
        filters = ";;".join(f"{FORMAT_NAMES[f]} (*.{f})" for f in FORMATS)
        path, _ = QFileDialog.getSaveFileName(self, "Export to", self.path_edit.text(), filters,
                                              f"{FORMAT_NAMES[fmt]} (*.{fmt})")
        if path:
            self.path_edit.setText(path)
            self._path_edited(path)

    def show_error(self, message: str) -> None:
        self.error.setText(message)
        self.error.setVisible(bool(message))

    # --- export ---------------------------------------------------------------------------------
    def do_export(self) -> bool:
        """Write the chosen export; on success remember the folder and close, else show why."""
        st = self.state
        text = self.path_edit.text().strip()
        if not text:
            self.show_error("Choose a file to export to.")
            return False
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = self.folder() / path  # a bare name goes where the dialog suggested, not the cwd
        try:
            path, fmt = named_path(path, self.format.currentData())
        except ExportError as exc:
            self.show_error(f"Export failed: {exc}")
            return False
        scope = self.scope.currentData()
        layer, head = st.layer, None
        if scope == "head":
            if st.focus is None:
                self.show_error("No focus head: click a head in the grid first.")
                return False
            layer, head = st.focus
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            if scope == "anatomy":
                self.written = export_view(anatomy_view(st), path, fmt=fmt,
                                           width=self.width_box.value(), model_path=st.model_path)
            elif scope in EFFECT_VIEWS:
                self.written = export_view(effects_view(st, scope), path, fmt=fmt,
                                           width=self.width_box.value(), model_path=st.model_path)
            else:
                weighted = self.value_weighted.isChecked()
                self.written = export_result(
                    _with_values(st) if weighted else st.result, path, model=st.model_name,
                    scope=scope, layer=layer, head=head, width=self.width_box.value(),
                    colormap=st.colormap, scale_mode=self.scale.currentData(),
                    hide_first=self.hide_first.isChecked(), fmt=fmt,
                    checkpoint=checkpoint_record(st.model), value_weighted=weighted,
                    ablation=st.effects.changed_by(st.result), model_path=st.model_path, badges=st.head_labels,
                    layer_kinds=st.model.config.layer_kinds() if st.model is not None else None)
        except (AttnvizError, OSError) as exc:
            message = describe_error(exc, writing=path)
            log.info("export to %s failed: %s", path, message)
            self.show_error(failure("Export failed", message))
            return False
        finally:
            QApplication.restoreOverrideCursor()
        remember_export(self.settings, path.parent.resolve(), fmt, scope,
                        self.width_box.value())
        self.show_error("")
        st.show_status(f"Exported {path.resolve()}" + (f" and {self.written[1].name}"
                                                       if len(self.written) > 1 else ""))
        self.accept()
        return True
