"""File -> Open view of a view whose model is not the one shown: the window loads that model and
applies the view only to it, never to the model that happens to be on screen (a failed load left
its source behind, and a second try applied the view to the current model)."""

import json

from PySide6.QtCore import QSettings

from windows import WAIT, widget


def sidecar(window, tmp_path, model: str, layer: int) -> str:
    from attnviz.figures.write import export_result

    export_result(window.state.result, tmp_path / "v.png", model=window.state.model_name, scope="layer",
                  layer=layer, width=400)
    path = tmp_path / "v.png.json"
    doc = json.loads(path.read_text())
    doc["model"] = model
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_view_of_a_model_that_fails_to_load_is_never_applied_to_the_current_one(window, qtbot, tmp_path):
    st = window.state
    assert st.layer == 0
    path = sidecar(window, tmp_path, str(tmp_path / "no-such-model"), layer=3)
    for attempt in range(2):  # the second try loads again, and fails again: never applied here
        window.open_view(path)
        qtbot.waitUntil(lambda: widget(window, "error_banner").isVisible() and not st.loading, timeout=WAIT)
        assert "no-such-model" in widget(window, "error_banner").text()
        assert st.layer == 0 and st.model_name == "all-MiniLM-L6-v2"
        window.clear_error()


def test_the_settings_remember_what_the_model_was_opened_from(window, qtbot, tmp_path, settings_path):
    st = window.state
    assert st.model_source == "all-MiniLM-L6-v2"
    assert QSettings(settings_path, QSettings.Format.IniFormat).value("model") == "all-MiniLM-L6-v2"
    window.load_model("attnviz-textbook")
    qtbot.waitUntil(lambda: st.model_name == "attnviz-textbook", timeout=WAIT)
    assert st.model_source == "attnviz-textbook"
    assert QSettings(settings_path, QSettings.Format.IniFormat).value("model") == "attnviz-textbook"
