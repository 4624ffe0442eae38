"""The window on GGUF models, offscreen: SmolLM2 opens from its file, the grid bands its 9 query heads
into 3 KV groups, the live KV-cache line equals the calculator, a GGUF without a supported tokenizer
takes typed ids with a notice, and a bad GGUF keeps the previous model."""

import pytest
from PySide6.QtCore import QSettings

from attnviz.engine.calc import calc_inputs_from_config, calculate
from attnviz.ui.app import create_window
from tiny import FIXTURES
from gguf_files import gguf_tensors, write_gguf
from windows import WAIT, open_window, wait_for_text, widget


@pytest.fixture
def smollm2_window(qtbot, tmp_path, smollm2):
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text="The keys to the cabinet are on the")
    yield w
    w.worker.wait_idle()


def test_smollm2_window_bands_kv_groups_and_shows_the_live_cache(smollm2_window, qtbot):
    w = smollm2_window
    m = w.state.model
    assert (m.config.n_head, m.config.n_kv_head) == (9, 3)
    assert w.state.result.kv_group.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # typing at the end reuses the cached prefix
    first = w.state.result.n_tokens
    w.calc_dock.show()
    w.calc_dock.raise_()
    text = "The keys to the cabinet are on the table"
    w.set_text(text)
    wait_for_text(qtbot, w, text)
    r = w.state.result
    assert r.cache_reused == first and r.cache_computed == r.n_tokens - first
    qtbot.waitUntil(lambda: "table" in w.token_strip.labels[-1] and w.calc_panel.live_label.text() != "",
                    timeout=WAIT)
    calc = calculate(calc_inputs_from_config(m.config, seq_len=r.n_tokens, kv_dtype="fp32"))
    line = w.calc_panel.live_label.text()
    assert r.cache_bytes == calc.kv_bytes_sequence
    assert f"{r.n_tokens:,} tokens × 30 layers × 3 KV heads × 64 × 2 (K, V) × 4 B" in line
    assert f"{calc.kv_bytes_sequence:,} bytes" in line
    assert f"reused {first:,} tokens and computed {r.n_tokens - first:,}" in line


def test_gguf_without_tokenizer_takes_ids_with_a_notice(qtbot, tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "tiny.gguf", cfg, tensors)
    w = create_window(model=str(path), text="5, 17, 3",
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    assert w.state.result.input_ids.tolist() == [5, 17, 3]
    assert widget(w, "model_notice").isVisible() and "type token ids" in widget(w, "model_notice").text()
    # a bad GGUF: a clear banner, and the tiny model stays
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(path.read_bytes()[:100])
    w.load_model(str(bad))
    qtbot.waitUntil(lambda: widget(w, "error_banner").isVisible(), timeout=WAIT)
    assert "truncated" in widget(w, "error_banner").text() and "Still showing tiny" in widget(w, "error_banner").text()
    assert w.state.model.path == path
    w.worker.wait_idle()


def test_a_first_start_opens_smollm2_and_minilm_is_one_click_away(qtbot, tmp_path):
    w = create_window(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
    assert w.state.model_name == "SmolLM2-135M-Instruct"
    assert w.settings.value("model") == "SmolLM2-135M-Instruct"
    with qtbot.waitSignal(w.worker.sigModelsFound, timeout=WAIT):  # the scan runs on the worker
        w.menus.models_menu.aboutToShow.emit()
    entries = {a.text().split("  ")[0]: a for a in w.menus.models_menu.actions() if a.text()}
    assert entries["SmolLM2-135M-Instruct"].isChecked()
    entries["all-MiniLM-L6-v2"].trigger()
    qtbot.waitUntil(lambda: w.state.model_name == "all-MiniLM-L6-v2" and w.state.result is not None
                    and w.state.result.tokens[0] == "[CLS]", timeout=WAIT)
    w.worker.wait_idle()
