"""Switching to a model with fewer layers while a layer past its last is shown (SmolLM2's 30 layers,
layer 20, to a 2-layer model with a sliding window, whose titles name each layer's kind): the layer
is clamped to the new model's range before anything is drawn. No exception, no error logged, no
Qt warning; the grid's titles name the new model's last layer."""

import json
import logging

from tiny import byte_level_tokenizer_json, llama_config, llama_tensors, write_model
from windows import PROMPT, WAIT, open_window, widget


def sliding_text_model(folder):
    """A 2-layer Mistral-family decoder (every layer local, window 4) with a byte-level tokenizer."""
    tok = byte_level_tokenizer_json()
    cfg = llama_config(vocab=len(json.loads(tok)["model"]["vocab"]), model_type="mistral", sliding_window=4)
    write_model(folder, cfg, llama_tensors(cfg))
    (folder / "tokenizer.json").write_text(tok, encoding="utf-8")
    return folder


def test_a_shallower_model_clamps_the_layer_before_drawing(qtbot, tmp_path, smollm2, caplog):
    caplog.set_level(logging.WARNING)
    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT)
    st = w.state
    st.set_layer(20)
    st.set_focus(20, 3)
    st.effects.toggle_head(20, 1)  # a switched-off head: the titles are redrawn on the switch too
    qtbot.waitUntil(lambda: st.result is not None and st.effects.run_of(st.result) is not None, timeout=WAIT)
    w.worker.wait_idle()
    w.load_model(str(sliding_text_model(tmp_path / "sliding")))
    qtbot.waitUntil(lambda: st.model.config.n_layer == 2 and st.result is not None
                    and st.result.text == PROMPT, timeout=WAIT)
    w.worker.wait_idle()
    assert st.layer == 1
    titles = w.grid.titles()
    assert titles and all(t.startswith("L1 H") and "local (window 4)" in t for t in titles)
    assert not widget(w, "error_banner").isVisible()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_the_last_models_layout_is_not_titled_with_the_new_models_layers(qtbot, tmp_path, smollm2,
                                                                        caplog):
    """Between the switch and the new model's first result the grid still holds the old layout:
    a redraw of its titles then (the head labels are reset with the model) must not read the new
    model's layers at the old layout's heads."""
    from attnviz.engine import load_model

    w = open_window(qtbot, tmp_path / "s.ini", model=str(smollm2.path), text=PROMPT)
    st = w.state
    st.set_layer(20)
    qtbot.waitUntil(lambda: st.result is not None and w.grid.titles()
                    and w.grid.titles()[0].startswith("L20 H"), timeout=WAIT)
    w.worker.wait_idle()
    caplog.set_level(logging.WARNING)
    st.set_model(load_model(sliding_text_model(tmp_path / "sliding")))  # no result for it yet
    assert st.layer == 1 and not any(t.startswith("L1 H") for t in w.grid.titles())
    assert not widget(w, "error_banner").isVisible()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
