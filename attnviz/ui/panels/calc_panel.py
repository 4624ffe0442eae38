"""CalcPanel: the calculator in the side panel, a view of AppState. Presets or free fields in; shapes,
parameters, KV cache, the MHA / GQA / MQA comparison and a plot of cache size against context length out.

All numbers come from `attnviz.engine.calc`; this widget edits the inputs (the fields made in
ui/panels/calc_fields.py), recomputes, and hands each result to the views in ui/panels/calc_views.py
(tables, plot, text lines)."""

from __future__ import annotations

import html
from dataclasses import replace

from PySide6.QtCore import QPoint, QRect, Signal
from PySide6.QtWidgets import QComboBox, QFormLayout, QFrame, QLabel, QScrollArea, QSpinBox, QVBoxLayout, QWidget

from attnviz.engine.calc import CalcInputs, CalcResult, calc_inputs_from_config, calculate, compare_note
from attnviz.engine.errors import CalcError
from attnviz.engine.calc.presets import load_presets
from attnviz.ui.panels.calc_fields import (
    CUSTOM, DEFAULT_PRESET, FIELDS, LOADED, RUN_FIELDS, dtype_combo, field_spin, field_values, preset_combo,
    set_item_enabled,
)
from attnviz.ui.panels.calc_notes import as_sentence, dropped_text, kept_text, typeset
from attnviz.ui.panels.calc_views import (
    MLA_SET, CompareTable, KVPlot, ShapesTable, error_label, flops_text, footnote_label, heading, kv_text, live_text,
    mla_fields, note_label, params_text, result_label, sentence_text, summary_text, tokens,
)


# what the settings keep of the panel (CalcPanel.fields), each read back as its type
FIELD_TYPES = {"preset": str, "base": str, "base_model": str, **{key: int for key in FIELDS}, "kv_dtype": str}


class CalcPanel(QWidget):
    """The shapes / parameters / KV-cache calculator as a side-panel widget: a view of AppState
    (the loaded model and the current result), or with no state a calculator on its own.

    What following the state calls (a panel without state can be given these directly):
      set_model_config(raw_config_dict, name)  fill from a loaded model, select "loaded model"
      set_seq_len(T)                            the current sentence's length (line + plot marker)
      set_live_cache(result, model)             what the engine's KV cache holds after this run
    What the settings keep: `fields()`, shown again by `set_fields`; sigFieldsChanged on a change.
    """

    sigFieldsChanged = Signal()

    def __init__(self, state=None, parent: QWidget | None = None) -> None:
        """With `state` (AppState) the panel follows the loaded model and the current result by
        itself; while it is not shown (set_shown(False): a dock behind another tab) it lets results
        pass and catches up when shown again."""
        super().__init__(parent)
        self.state = state
        self._shown = True
        self.presets = load_presets()
        self.result: CalcResult | None = None
        self.sentence_len: int | None = None
        self._base: CalcInputs = self.presets[DEFAULT_PRESET].inputs
        self._loaded: CalcInputs | None = None
        self._loaded_name, self._counted_by = "", ""  # (the model whose tokenizer counted sentence_len)
        self._live, self._live_of = "", ""  # the live KV cache line (rich text) and whose cache it is
        self._base_key = DEFAULT_PRESET  # the preset (or LOADED) the fields were last filled from
        self._saved: dict | None = None  # saved fields shown again once the first model has come
        self._build()
        self._connect()
        self._select(DEFAULT_PRESET)
        if state is not None:
            state.sigModelChanged.connect(self._follow_model)
            state.sigTextResultChanged.connect(self._follow_result)  # a dense result or a long run's
            self._follow_model(state.model)
            self._follow_result(state.text_result)

    # -- a view of AppState ----------------------------------------------------------------------

    def _follow_model(self, model) -> None:
        if model is not None:
            self.set_model_config(model.config.raw, model.name)
            if self._loaded is None:  # (a config the panel cannot read: the saved choice is kept)
                return
            saved, self._saved = self._saved, None
            if saved is not None:  # (the model's arrival selected it over the saved choice)
                self.set_fields(saved)

    def _follow_result(self, result) -> None:
        if self._on_screen():
            self._show_result(result)

    def _on_screen(self) -> bool:
        """In a window, whether the panel is on screen now (Qt keeps a dock behind another tab
        'visible', moved out of the window), asked of Qt rather than of the last visibilityChanged,
        which can arrive after the dock is raised again; on its own, what set_shown said. (Not its
        visibleRegion: that leaves out its children, and once the scroll area needs no scroll bar
        it covers the whole panel, empty in a tall window.)"""
        window = self.window()
        if window is self:
            return self._shown
        return self.isVisible() and window.rect().intersects(
            QRect(self.mapTo(window, QPoint(0, 0)), self.size()))

    def _show_result(self, result) -> None:
        if result is None:  # an empty sentence (0 tokens), or none computed yet on this model
            self.sentence_len = 0 if not self.state.text.strip() else None
            self._show_sentence()
        else:
            self.set_seq_len(len(result.tokens), self.state.model.name if self.state.model else "")
        run = self.state.long.run
        if run is not None and result is run.result and self.state.model is not None:
            # a long text runs apart from the model's KV cache (its cache_bytes are the model's own,
            # an earlier text's): say so rather than pair its T with those bytes
            self._live_of = self.state.model.name
            self._live = (f"live KV cache: the long text's {tokens(len(result.tokens))} keep their own "
                          "K and V, with their patterns (the model's cache is not used)")
            self._show_live()
            return
        self.set_live_cache(result, self.state.model)

    def set_shown(self, shown: bool) -> None:
        """Whether the panel is on screen; a hidden calculator catches up when shown."""
        self._shown = bool(shown)
        if self._shown and self.state is not None:
            self._show_result(self.state.text_result)

    # -- public API ------------------------------------------------------------------------------

    def set_model_config(self, raw_config: dict, name: str) -> None:
        """Fill the calculator from a loaded model's config.json and select it."""
        self.dropped_note.hide()  # (it named the model shown before)
        try:
            self._loaded = calc_inputs_from_config(raw_config)
        except CalcError as exc:
            self._loaded = None
            self.general_error.setText(f"{name}: {exc}")
            self.general_error.show()
            return
        self._loaded_name = name
        self.preset_combo.setItemText(0, f"Loaded model: {name}")
        set_item_enabled(self.preset_combo, 0, True)
        self._select(LOADED)

    def set_seq_len(self, T: int, counted_by: str = "") -> None:
        """The sentence's token count by `counted_by`'s tokenizer (a model's name): its line and marker."""
        self.sentence_len, self._counted_by = int(T), counted_by
        self._show_sentence()

    def set_live_cache(self, result, model) -> None:
        """The engine's own KV cache after `result`: its bytes as the arrays hold them, the
        calculator's factors beside them, and what this edit reused."""
        self._live = live_text(result, model)
        if model is not None:
            self._live_of = model.name
        self._show_live()

    def _show_live(self) -> None:
        """The live line, led by the loaded model's name while the figures above are another
        layout's (a preset, or Custom numbers): the engine's cache is the loaded model's own."""
        other = self.preset_combo.currentData() != LOADED and self._live
        lead = f"<b>{html.escape(self._live_of)}</b> (the loaded model, not the layout above): " if other else ""
        self.live_label.setText(lead + self._live)
        self.live_label.setVisible(bool(self._live))

    def fields(self) -> dict:
        """What the user set, as the settings keep it (FIELD_TYPES): the preset chosen ("__loaded__"
        for the loaded model, "__custom__" with `base` the preset its numbers started from), the
        fields and the KV dtype; a field that shows the preset's own value is "" (a preset's, or
        the next loaded model's, own context length then)."""
        if self._saved is not None:  # (not shown yet: kept as they were)
            return dict(self._saved)
        shown = {key: spin.value() for key, spin in self.spins.items()}
        shown["kv_dtype"] = self.dtype_combo.currentData()
        preset = self.preset_combo.currentData()
        if preset != CUSTOM:
            own = field_values(self._base, self.spins, self.dtype_combo)
            shown = {key: "" if value == own[key] else value for key, value in shown.items()}
        model = self._loaded_name if self._base_key == LOADED else ""
        return {"preset": preset, "base": self._base_key, "base_model": model, **shown}

    def set_fields(self, saved: dict) -> None:
        """Show the fields `saved` (fields()' keys, each of its type; any left out): a preset no
        longer known, a value outside its field's range or a dtype not offered leaves what the
        panel shows. Custom numbers come back only on the base they were made from (a known preset,
        or the loaded model of the same name); on any other, only the run fields (seq_len, batch,
        KV dtype), on the loaded model, with a note naming those shown as saved and those saved
        unreadable or out of range (an unreadable value comes as its text: saved_fields). Without a model yet, shown again once the first one has
        come."""
        if self.state is not None and self.state.model is None:
            self._saved = dict(saved)
        preset, base = saved.get("preset"), saved.get("base")
        loaded = self._loaded is not None
        made_on = None  # Custom numbers of another model: said once the fields are shown
        if preset == CUSTOM and not (base in self.presets or base == LOADED and loaded
                                     and saved.get("base_model") in (None, "", self._loaded_name)):
            preset = LOADED  # its numbers on another model than theirs: only how it was run
            if loaded:  # (said once the model is shown)
                made_on = (saved.get("base_model") if base == LOADED else base) or "another model"
        if preset == CUSTOM:
            self._select(base)
        elif preset in self.presets or preset == LOADED and loaded:
            self._select(preset)
        editable = self.spins if preset == CUSTOM else RUN_FIELDS
        if self._base.mla is not None:  # MLA sets these (greyed): a number saved in them is not MLA's
            editable = [key for key in editable if key not in MLA_SET]
        restored, reset = [], []  # the run fields shown as saved, and those saved but not usable
        for key in editable:
            spin, value = self.spins[key], saved.get(key)
            if isinstance(value, int) and spin.minimum() <= value <= spin.maximum():
                spin.blockSignals(True)
                spin.setValue(value)
                spin.blockSignals(False)
                restored.append(key)
            elif key in saved:
                reset.append(key)
        index = self.dtype_combo.findData(saved.get("kv_dtype"))
        if index >= 0:
            self.dtype_combo.blockSignals(True)
            self.dtype_combo.setCurrentIndex(index)
            self.dtype_combo.blockSignals(False)
        (restored if index >= 0 else reset if "kv_dtype" in saved else []).append("kv_dtype")
        if made_on is not None:
            self.dropped_note.setText(dropped_text(made_on, self._loaded_name, restored, reset))
            self.dropped_note.show()
        if preset == CUSTOM:
            self.preset_combo.blockSignals(True)
            self.preset_combo.setCurrentIndex(self.preset_combo.findData(CUSTOM))
            self.preset_combo.blockSignals(False)
        self._recompute()

    # -- layout ----------------------------------------------------------------------------------

    def _build(self) -> None:
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        outer.addWidget(scroll)
        body = QWidget()
        scroll.setWidget(body)
        lay = QVBoxLayout(body)
        lay.setContentsMargins(8, 8, 8, 8)
        lay.setSpacing(6)
        lay.addWidget(self._build_presets())
        self.dropped_note = note_label()  # remembered Custom figures not shown, until the user changes a field
        lay.addWidget(self.dropped_note)
        lay.addLayout(self._build_fields())
        self.general_error = error_label()
        lay.addWidget(self.general_error)
        self.kept_note = note_label()  # Custom: the inputs kept from the model it started from
        lay.addWidget(self.kept_note)
        self.results = QWidget()
        self._build_results(QVBoxLayout(self.results))
        lay.addWidget(self.results)
        lay.addStretch(1)

    def _build_presets(self) -> QComboBox:
        self.preset_combo = preset_combo(self.presets)
        return self.preset_combo

    def _build_fields(self) -> QFormLayout:
        """One spin box per shape field and the KV dtype, each with its error line."""
        form = QFormLayout()
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setVerticalSpacing(3)
        self.spins: dict[str, QSpinBox] = {}
        self.error_labels: dict[str, QLabel] = {}
        for key, (label, *_) in FIELDS.items():
            self.spins[key] = field_spin(key)
            form.addRow(label, self._with_error(key, self.spins[key]))
        self.dtype_combo = dtype_combo()
        form.addRow("KV dtype", self._with_error("kv_dtype", self.dtype_combo))
        return form

    def _build_results(self, res: QVBoxLayout) -> None:
        """The figures: summary, shapes, parameters, KV cache, the comparison, FLOPs, notes."""
        res.setContentsMargins(0, 0, 0, 0)
        res.setSpacing(6)
        self.summary_label = result_label()
        res.addWidget(self.summary_label)

        res.addWidget(heading("Shapes [out, in]"))
        self.shapes_table = ShapesTable()
        res.addWidget(self.shapes_table)

        res.addWidget(heading("Parameters"))
        self.params_label = result_label()
        res.addWidget(self.params_label)

        res.addWidget(heading("KV cache"))
        self.kv_label = result_label()
        res.addWidget(self.kv_label)
        self.sentence_label = result_label()
        self.sentence_label.setToolTip("The sentence in the text box, cached by this model layout.")
        res.addWidget(self.sentence_label)
        self.live_label = result_label()
        self.live_label.setToolTip(
            "The keys and values (after RoPE) that attnviz's own engine keeps from the last run, in "
            "float32: the tokens' own bytes (the calculator's count), and the memory of the arrays "
            "that hold them, which keep room for the next positions once an edit has extended them. "
            "An edit reuses the longest unchanged token prefix: under the causal mask earlier rows "
            "cannot change, so only the new tokens are computed.")
        res.addWidget(self.live_label)

        res.addWidget(heading("MHA / as given / MQA"))
        self.compare_table = CompareTable()
        res.addWidget(self.compare_table)
        self.compare_note = footnote_label()  # past a sliding window: how the table's total is made
        res.addWidget(self.compare_note)

        self.plot = KVPlot()
        res.addWidget(self.plot)

        self.flops_label = result_label()
        res.addWidget(self.flops_label)

        self.notes_label = footnote_label()
        res.addWidget(self.notes_label)

    def _with_error(self, key: str, field: QWidget) -> QWidget:
        box = QWidget()
        v = QVBoxLayout(box)
        v.setContentsMargins(0, 0, 0, 0)
        v.setSpacing(1)
        v.addWidget(field)
        self.error_labels[key] = error_label()
        v.addWidget(self.error_labels[key])
        return box

    # -- signals ---------------------------------------------------------------------------------

    def _connect(self) -> None:
        self.preset_combo.currentIndexChanged.connect(self._on_preset)
        for key, spin in self.spins.items():
            # the model's own numbers make it another model; how it is run (context, batch,
            # cache dtype) does not, so the preset's name stays
            spin.valueChanged.connect(self._recompute if key in RUN_FIELDS else self._on_edit)
        self.dtype_combo.currentIndexChanged.connect(self._recompute)
        # a change of the user's (set_fields and _fill_fields block the spins' signals; activated
        # comes only from the user), connected after the handlers above so that it sees their work
        for spin in self.spins.values():
            spin.valueChanged.connect(self._user_changed)
        for combo in (self.preset_combo, self.dtype_combo):
            combo.activated.connect(self._user_changed)

    def _user_changed(self, *_args) -> None:
        """Before the first model, what the user now shows replaces the saved fields: kept when the
        model comes, and what the settings write if none comes. A saved choice of the loaded model
        keeps it: the preset shown until the model comes stands in for it, and only the run field
        changed is taken. Once a model is shown, the fields as shown are the user's."""
        saved, self._saved = self._saved, None
        self.dropped_note.hide()
        if self.state is None or self.state.model is not None or saved is None:
            if self.state is not None and self.state.model is None:
                self._saved = self.fields()
            return
        run = {self.spins[k]: k for k in RUN_FIELDS}
        if LOADED in (saved.get("preset"), saved.get("base")) and self.sender() in (*run, self.dtype_combo):
            key = run.get(self.sender(), "kv_dtype")
            value = self.dtype_combo.currentData() if key == "kv_dtype" else self.spins[key].value()
            self._saved = {**saved, key: value}
            return
        self._saved = self.fields()

    def _select(self, key: str) -> None:
        index = self.preset_combo.findData(key)
        if index == self.preset_combo.currentIndex():
            self._on_preset(index)
        else:
            self.preset_combo.setCurrentIndex(index)

    def _on_preset(self, index: int) -> None:
        key = self.preset_combo.itemData(index)
        if key == CUSTOM:
            self._recompute()
            return
        if key == LOADED:
            if self._loaded is None:
                return
            base = self._loaded
        else:
            base = self.presets[key].inputs
        self._base, self._base_key = base, key
        self._fill_fields(base)
        self._recompute()

    def _on_edit(self, *_args) -> None:
        if self.preset_combo.currentData() != CUSTOM:
            self.preset_combo.blockSignals(True)
            self.preset_combo.setCurrentIndex(self.preset_combo.findData(CUSTOM))
            self.preset_combo.blockSignals(False)
        self._recompute()

    def _fill_fields(self, inp: CalcInputs) -> None:
        """Show a model's numbers in the fields without treating it as an edit."""
        values = field_values(inp, self.spins, self.dtype_combo)
        for key, spin in self.spins.items():
            spin.blockSignals(True)
            spin.setValue(values[key])
            spin.blockSignals(False)
        mla = mla_fields(inp) if inp.mla is not None else {}
        for key in MLA_SET:
            self.spins[key].setEnabled(not mla)
            self.spins[key].setToolTip(mla[key][1] if mla else FIELDS[key][1])
        self.spins["n_kv_head"].setSpecialValueText("latent (MLA)" if mla else "")
        self.spins["d_head"].setSpecialValueText("MLA" if mla else "auto")
        self.dtype_combo.blockSignals(True)
        self.dtype_combo.setCurrentIndex(self.dtype_combo.findData(values["kv_dtype"]))
        self.dtype_combo.blockSignals(False)

    def _inputs(self) -> CalcInputs:
        s = {key: spin.value() for key, spin in self.spins.items()}
        mla = self._base.mla is not None
        return replace(
            self._base, d_model=s["d_model"], n_head=s["n_head"],
            n_kv_head=None if mla else s["n_kv_head"],
            d_head=self._base.d_head if mla else (s["d_head"] or None),
            n_layer=s["n_layer"], seq_len=s["seq_len"], batch=s["batch"],
            kv_dtype=self.dtype_combo.currentData())

    # -- results ---------------------------------------------------------------------------------

    def _recompute(self, *_args) -> None:
        self.sigFieldsChanged.emit()
        for label in (*self.error_labels.values(), self.general_error):
            label.hide()
        try:
            result = calculate(self._inputs())
        except CalcError as exc:
            label = self.error_labels.get(getattr(exc, "field", None), self.general_error)
            label.setText(str(exc))
            label.show()
            self.results.setEnabled(False)  # the last good result stays, greyed
            return
        self.results.setEnabled(True)
        self.result = result
        self._show(result)

    def _show(self, r: CalcResult) -> None:
        self.summary_label.setText(summary_text(r))
        self.shapes_table.show_result(r)
        self.params_label.setText(params_text(r))
        self.kv_label.setText(kv_text(r))
        self.compare_table.show_result(r)
        self.compare_note.setText(compare_note(r))
        self.compare_note.setVisible(bool(compare_note(r)))
        self.flops_label.setText(flops_text(r))

        notes = list(r.warnings)
        key = self.preset_combo.currentData()
        base = self.presets[self._base_key].name if self._base_key in self.presets else self._loaded_name
        self.kept_note.setText(kept_text(base, r.inputs) if key == CUSTOM else "")
        self.kept_note.setVisible(key == CUSTOM)
        if key in self.presets:
            p = self.presets[key]
            if p.notes:
                notes.append(typeset(p.notes))
            notes.append(f"source: {typeset(p.source)}")
        notes.append("Shapes are [out, in], as nn.Linear stores them (the Anatomy tab draws the "
                     "same weights [in, out], as x @ W multiplies them); KiB/MiB/GiB = 1024-based.")
        self.notes_label.setText("\n".join(as_sentence(n) for n in notes))
        self.plot.show_result(r, self.sentence_len)
        self._show_sentence()
        self._show_live()

    def _show_sentence(self) -> None:
        of = self._loaded_name if self._base_key == LOADED else ""  # the model whose layout is shown
        self.sentence_label.setText(sentence_text(self.result, self.sentence_len, self._counted_by, of))
        self.plot.show_sentence(self.result, self.sentence_len, self._counted_by, of)
