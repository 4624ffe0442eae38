"""The Calculator's and Generate's fields are remembered across restarts: a window opened on a
settings file, its fields changed and closed; a new window on the same file shows them. A saved
value out of its field's range, unreadable, or of a preset no longer known gives the field's
default, without an error."""

from PySide6.QtCore import QSettings

from windows import drain_events, widget


def calc_shown(panel) -> dict:
    """The Calculator as a user reads it: the preset box, each field's text and the KV dtype."""
    return {"preset": panel.preset_combo.currentText(), "kv_dtype": panel.dtype_combo.currentText(),
            **{key: spin.text() for key, spin in panel.spins.items()}}


def generate_shown(panel) -> dict:
    return {"new": panel.n_spin.text(), "temperature": panel.temp_spin.text(), "top_p": panel.top_p_spin.text(),
            "seed": panel.seed_spin.text(), "go_on": panel.go_on_check.isChecked()}


def select(combo, data) -> None:
    combo.setCurrentIndex(combo.findData(data))


def restarted(textbook_window, w, path):
    """`w` closed, and a window opened again on its settings file (a restart)."""
    w.close()
    w.worker.wait_idle()
    again = textbook_window(path, ready=True)
    drain_events()
    return again


def test_a_preset_its_run_fields_and_the_sampling_options_come_back(textbook_window, tmp_path):
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    calc, gen = w.calc_panel, w.generate_panel
    select(calc.preset_combo, "mistral-7b-v0.1")
    calc.spins["seq_len"].setValue(12_345)
    calc.spins["batch"].setValue(8)
    select(calc.dtype_combo, "int8")
    gen.n_spin.setValue(50)
    gen.temp_spin.setValue(0.8)
    gen.top_p_spin.setValue(0.9)
    gen.seed_spin.setValue(7)
    gen.go_on_check.setChecked(True)
    calc_set, gen_set = calc_shown(calc), generate_shown(gen)
    assert calc_set["preset"].startswith("Mistral") and calc_set["seq_len"] == "12,345"
    assert gen_set == {"new": "50", "temperature": "0.80", "top_p": "0.90", "seed": "7", "go_on": True}

    w = restarted(textbook_window, w, path)
    assert calc_shown(w.calc_panel) == calc_set
    assert generate_shown(w.generate_panel) == gen_set
    assert "12,345 tokens × batch 8" in w.calc_panel.kv_label.text()  # computed with them, too
    assert w.generate_panel.seed_spin.isEnabled()  # a temperature above 0: the seed is used


def test_custom_numbers_come_back_custom_and_the_loaded_model_follows_the_model(textbook_window, tmp_path):
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    calc = w.calc_panel
    loaded = calc_shown(calc)
    assert loaded["preset"].startswith("Loaded model")
    select(calc.preset_combo, "gpt2")
    calc.spins["n_layer"].setValue(7)  # the model's own numbers edited: Custom
    calc.spins["d_model"].setValue(1_000)
    custom = calc_shown(calc)
    assert custom["preset"] == "Custom" and custom["n_layer"] == "7" and custom["d_model"] == "1,000"
    w = restarted(textbook_window, w, path)
    assert calc_shown(w.calc_panel) == custom

    select(w.calc_panel.preset_combo, "__loaded__")  # back to the loaded model, its batch set
    w.calc_panel.spins["batch"].setValue(3)
    w = restarted(textbook_window, w, path)
    assert calc_shown(w.calc_panel) == {**loaded, "batch": "3"}


def test_values_out_of_range_unreadable_or_of_a_gone_preset_give_the_defaults(textbook_window, tmp_path):
    path = tmp_path / "s.ini"
    first = textbook_window(path, ready=True)
    defaults = calc_shown(first.calc_panel), generate_shown(first.generate_panel)
    first.close()
    first.worker.wait_idle()
    s = QSettings(str(path), QSettings.Format.IniFormat)
    for key, value in {"calc/preset": "a-model-since-removed", "calc/base": "gone", "calc/seq_len": "0",
                       "calc/batch": "many", "calc/kv_dtype": "fp7", "calc/d_model": "-5",
                       "generate/new_tokens": "100000", "generate/temperature": "9",
                       "generate/top_p": "nan", "generate/seed": "-1", "generate/go_on": "maybe"}.items():
        s.setValue(key, value)
    s.sync()
    w = textbook_window(path, ready=True)
    assert (calc_shown(w.calc_panel), generate_shown(w.generate_panel)) == defaults
    assert not widget(w, "error_banner").isVisible()
    w.close()  # (it writes its fields: the defaults)
    w.worker.wait_idle()
    s.setValue("calc/batch", "4")  # one good value among bad ones is kept
    s.setValue("calc/seq_len", "0")
    s.setValue("generate/seed", "11")
    s.setValue("generate/temperature", "9")
    s.sync()
    w = textbook_window(path, ready=True)
    assert calc_shown(w.calc_panel) == {**defaults[0], "batch": "4"}
    assert generate_shown(w.generate_panel) == {**defaults[1], "seed": "11"}


def test_fields_shown_before_the_model_has_come_stay_when_it_comes(qtbot):
    """A Calculator built while the first model loads (its tab raised at start) keeps the saved
    preset and context when the model comes, instead of switching to the loaded model's."""
    from attnviz.engine import load_model
    from attnviz.engine.reading import textbook
    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.panels.calc_panel import CalcPanel

    state = AppState()
    panel = CalcPanel(state)
    qtbot.addWidget(panel)
    panel.set_fields({"preset": "gpt2", "base": "gpt2", "seq_len": 777, "batch": 2, "kv_dtype": "fp8"})
    state.set_model(load_model(textbook.TEXTBOOK_NAME))
    shown = calc_shown(panel)
    assert (shown["preset"], shown["seq_len"], shown["batch"], shown["kv_dtype"]) == \
        (panel.presets["gpt2"].name, "777", "2", "fp8 (8 bits)")
    assert panel.preset_combo.itemText(0).startswith("Loaded model: ")  # (offered, not chosen)


def calc_restarted(qtbot, tmp_path, fields: dict, config: str):
    """A Calculator on its own, given the model `config` (a fixture) and the fields `fields` as a
    settings file gives them back after a restart."""
    import json
    from pathlib import Path

    from attnviz.ui.machinery.settings import saved_fields
    from attnviz.ui.panels.calc_panel import FIELD_TYPES, CalcPanel

    s = QSettings(str(tmp_path / f"{config}.ini"), QSettings.Format.IniFormat)
    for key, value in fields.items():
        s.setValue(f"calc/{key}", value)
    panel = CalcPanel()
    qtbot.addWidget(panel)
    raw = json.loads((Path(__file__).parents[1] / "fixtures" / config / "config.json").read_text())
    panel.set_model_config(raw, config)
    panel.set_fields(saved_fields(s, "calc", FIELD_TYPES))
    return panel


def test_custom_numbers_of_a_loaded_model_come_back_only_on_that_model(qtbot, tmp_path):
    """Custom numbers started from the loaded model come back Custom on the same model, with the
    same totals; on another model only how it was run comes back (context, batch, KV dtype), on
    that model's own numbers, as they do when the preset they started from is no longer known."""
    first = calc_restarted(qtbot, tmp_path, {}, "gemma3")
    first.spins["n_layer"].setValue(first.spins["n_layer"].value() + 1)  # Custom on the loaded model
    first.spins["seq_len"].setValue(4_000)
    first.spins["batch"].setValue(2)
    select(first.dtype_combo, "int8")
    custom, saved = calc_shown(first), first.fields()
    assert custom["preset"] == "Custom"

    again = calc_restarted(qtbot, tmp_path, saved, "gemma3")
    assert calc_shown(again) == custom
    assert again.kv_label.text() == first.kv_label.text()

    other = calc_restarted(qtbot, tmp_path, {}, "llama_gqa")
    other.spins["seq_len"].setValue(4_000)
    other.spins["batch"].setValue(2)
    select(other.dtype_combo, "int8")
    want = calc_shown(other), other.kv_label.text()
    assert want[0]["preset"] == "Loaded model: llama_gqa"
    for gone in ({}, {"base": "a-model-since-removed"}):
        moved = calc_restarted(qtbot, tmp_path, {**saved, **gone}, "llama_gqa")
        assert (calc_shown(moved), moved.kv_label.text()) == want


def test_changes_made_before_the_model_has_come_stay_when_it_comes(qtbot):
    """What the user changes while the first model loads replaces the saved fields: shown when the
    model comes, and written at close if none comes."""
    from attnviz.engine import load_model
    from attnviz.engine.reading import textbook
    from attnviz.ui.machinery.state import AppState
    from attnviz.ui.panels.calc_panel import CalcPanel

    state = AppState()
    panel = CalcPanel(state)
    qtbot.addWidget(panel)
    panel.set_fields({"preset": "gpt2", "base": "gpt2", "seq_len": 777, "batch": 2, "kv_dtype": "fp8"})
    index = panel.preset_combo.findData("mistral-7b-v0.1")  # the user picks another preset
    panel.preset_combo.setCurrentIndex(index)
    panel.preset_combo.activated.emit(index)
    panel.spins["batch"].setValue(5)  # and a batch
    panel.spins["n_layer"].setValue(9)  # and a number of its own: Custom
    shown = calc_shown(panel)
    assert (shown["preset"], shown["batch"], shown["n_layer"]) == ("Custom", "5", "9")
    assert {key: panel.fields().get(key) for key in ("preset", "base", "batch", "n_layer")} == \
        {"preset": "__custom__", "base": "mistral-7b-v0.1", "batch": 5, "n_layer": 9}  # what close writes
    state.set_model(load_model(textbook.TEXTBOOK_NAME))
    assert calc_shown(panel) == shown


def test_a_run_field_set_while_the_model_loads_keeps_the_remembered_custom_of_that_model(
        textbook_window, tmp_path):
    """Until the model comes the panel shows a stand-in preset; setting the batch then keeps the
    remembered Custom of the loaded model (its n_layer) and takes the batch, not the stand-in."""
    path = tmp_path / "s.ini"
    w = textbook_window(path, ready=True)
    w.calc_panel.spins["n_layer"].setValue(7)  # Custom, from the loaded textbook model
    custom = calc_shown(w.calc_panel)
    assert custom["preset"] == "Custom" and custom["n_layer"] == "7"
    w.close()
    w.worker.wait_idle()
    w = textbook_window(path)
    assert w.state.model is None  # (no turn of the event loop yet: the model is on its way)
    w.calc_panel.spins["batch"].setValue(4)
    w = restarted(textbook_window, w, path)
    assert calc_shown(w.calc_panel) == {**custom, "batch": "4"}


def test_custom_numbers_not_shown_on_another_model_are_named_once(qtbot, tmp_path):
    """Custom numbers made on one model, the next start on another: the panel says in words which
    model they were for and what it shows instead; not on the model they were made on, and gone
    once the user changes a field."""
    first = calc_restarted(qtbot, tmp_path, {}, "gemma3")
    first.spins["n_layer"].setValue(first.spins["n_layer"].value() + 1)  # Custom on gemma3
    saved = first.fields()

    def note(panel) -> str:  # the panel's words about them, as shown
        from PySide6.QtWidgets import QLabel

        panel.show()
        qtbot.waitExposed(panel)
        return next((label.text() for label in panel.findChildren(QLabel)
                     if label.isVisible() and "Custom figures" in label.text()), "")

    assert note(calc_restarted(qtbot, tmp_path, saved, "gemma3")) == ""
    other = calc_restarted(qtbot, tmp_path, saved, "llama_gqa")
    said = note(other)
    assert said.startswith("The Custom figures you left were for gemma3; showing llama_gqa"), said
    assert other.preset_combo.currentText() == "Loaded model: llama_gqa"
    other.spins["batch"].setValue(3)  # the user changes a field: the note has been read
    assert note(other) == ""
    again = calc_restarted(qtbot, tmp_path, saved, "llama_gqa")
    assert note(again).startswith("The Custom figures you left were for gemma3")
    again.set_model_config({"model_type": "gpt2"}, "broken")  # a model the calculator cannot read
    assert note(again) == "", "the note still names llama_gqa beside the next model's error"
    assert again.general_error.isVisible() and again.general_error.text().startswith("broken: ")
    gone = calc_restarted(qtbot, tmp_path, {**saved, "base": "a-model-since-removed"}, "llama_gqa")
    assert note(gone).startswith("The Custom figures you left were for a-model-since-removed; showing llama_gqa")


def test_the_note_on_custom_numbers_of_another_model_names_only_the_run_fields_shown_as_saved(
        qtbot, tmp_path):
    """Custom numbers made on a preset no longer known come back as the loaded model with how they
    were run; the note names the run fields shown as saved, and those saved but unreadable or out
    of range (shown at their defaults) apart."""
    from PySide6.QtWidgets import QLabel

    def note(panel) -> str:
        panel.show()
        qtbot.waitExposed(panel)
        return next((label.text() for label in panel.findChildren(QLabel)
                     if label.isVisible() and "Custom figures" in label.text()), "")

    defaults = calc_shown(calc_restarted(qtbot, tmp_path, {}, "llama_gqa"))
    custom = {"preset": "__custom__", "base": "nope-preset", "d_model": "-5"}
    bad = calc_restarted(qtbot, tmp_path, {**custom, "seq_len": "99999999999", "batch": "abc",
                                           "kv_dtype": "fp3"}, "llama_gqa")
    assert calc_shown(bad) == defaults
    assert note(bad) == ("The Custom figures you left were for nope-preset; showing llama_gqa. Your saved "
                         "context, batch and KV dtype could not be used (unreadable or out of range): "
                         "they show their default.")
    some = calc_restarted(qtbot, tmp_path, {**custom, "seq_len": "0", "batch": "3", "kv_dtype": "int8"},
                          "llama_gqa")
    assert (calc_shown(some)["batch"], calc_shown(some)["seq_len"]) == ("3", defaults["seq_len"])
    assert note(some) == ("The Custom figures you left were for nope-preset; showing llama_gqa, with your "
                          "batch and KV dtype (the same fields on another model give other totals). Your "
                          "saved context could not be used (unreadable or out of range): it shows its default.")
