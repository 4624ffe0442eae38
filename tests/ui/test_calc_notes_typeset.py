"""A preset's notes under the Calculator's results as the window writes them: "!=" as "≠" (Gemma 3
270M's "1024 != 640"), an arrow for "->", and a spaced hyphen as an en dash between words or in a
range or between two capital letters (an "A - B test") but a minus "−" in a formula ("d - 1",
"A - B = C"); presets.json keeps the reference configs' ASCII."""

import pytest

from attnviz.engine.calc.presets import PRESETS_PATH, load_presets
from attnviz.ui.panels.calc_notes import typeset


def _select(panel, preset_id):
    panel.preset_combo.setCurrentIndex(panel.preset_combo.findData(preset_id))


def test_gemma_3_270m_reads_not_equal_in_the_window_and_ascii_in_presets_json(calc_panel):
    assert "4 * 256 = 1024 != 640" in load_presets()["gemma-3-270m"].notes  # (as its reference has it)
    assert "4 * 256 = 1024 != 640" in PRESETS_PATH.read_text(encoding="utf-8")
    _select(calc_panel, "gemma-3-270m")
    text = calc_panel.notes_label.text()
    assert "4 * 256 = 1024 \u2260 640" in text, text
    for key in load_presets():
        _select(calc_panel, key)
        assert "!=" not in calc_panel.notes_label.text(), key


@pytest.mark.parametrize("note, shown", [
    ("d - 1", "d \u2212 1"),
    ("the last d_model - 1 rows", "the last d_model \u2212 1 rows"),
    ("(n_head - 1) * d_head", "(n_head \u2212 1) * d_head"),
    ("4 * 256 - 1 = 1023", "4 * 256 \u2212 1 = 1023"),
    ("x - y", "x \u2212 y"),
    ("truncate shorter - not verified here", "truncate shorter \u2013 not verified here"),
    ("num_key_value_heads 128 - meaningless", "num_key_value_heads 128 \u2013 meaningless"),
    ("Llama 2 7B/13B - wrong placeholder", "Llama 2 7B/13B \u2013 wrong placeholder"),
    ("layers 5 - 10", "layers 5 \u2013 10"),
    ("a = 2; layers 5 - 10", "a = 2; layers 5 \u2013 10"),
    ("n_inner=null -> 4*n_embd", "n_inner=null \u2192 4*n_embd"),
    ("16*256 = 4096 != 3072", "16*256 = 4096 \u2260 3072"),
    ("4*256 - 1 = 1023", "4*256 \u2212 1 = 1023"),
    ("layers 5 - 10 use sliding window (4096/2)", "layers 5 \u2013 10 use sliding window (4096/2)"),
    ("see https://hf.co/x (layers 0 - 3)", "see https://hf.co/x (layers 0 \u2013 3)"),
    ("context 2023 - 2024 (rope_theta = 1e6)", "context 2023 \u2013 2024 (rope_theta = 1e6)"),
    ("3 dense + 58 MoE layers 3 - 61", "3 dense + 58 MoE layers 3 \u2013 61"),
    ("Qwen2 - Qwen3 share the layout", "Qwen2 \u2013 Qwen3 share the layout"),
    ("heads h0 - h7", "heads h0 \u2013 h7"),
    ("an A - B test of two models", "an A \u2013 B test of two models"),
    ("A - B", "A \u2013 B"),
    ("A - B = C", "A \u2212 B = C"),
    ("2*A - B", "2*A \u2212 B"),
    ("A - B*2", "A \u2212 B*2"),
    ("(A - B) / 2", "(A \u2212 B) / 2"),
    ("N - 1", "N \u2212 1"),
    ("A - b", "A \u2212 b"),
    ("(T - W) tokens past the window", "(T \u2212 W) tokens past the window"),
    ("[Q - K]", "[Q \u2212 K]"),
])
def test_a_spaced_hyphen_is_a_minus_in_a_formula_and_a_dash_between_words_or_in_a_range(note, shown):
    assert typeset(note) == shown
