"""A remembered memory budget that cannot load the model (an older version's bare "512", a size
below one layer, a hand-edited "lots") never leaves the window with no model: the model opens with
the budget auto, the banner says so once and names Models > Memory budget, the remembered value
is put back to auto, and the dialog then offers a value it takes."""

import pytest
from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QInputDialog, QMessageBox

from attnviz.engine.reading import memory_budget as MB
from windows import open_window, wait_for_text, widget


@pytest.mark.parametrize("saved", ["512", "1K", "lots"])
def test_a_remembered_budget_that_cannot_load_the_model_falls_back_to_auto(
        saved, qtbot, monkeypatch, settings_path):
    QSettings(settings_path, QSettings.Format.IniFormat).setValue("memory_budget", saved)
    try:
        w = open_window(qtbot, settings_path)  # (waits for the first heatmaps)
        banner = widget(w, "error_banner")
        assert w.state.model is not None and w.windowTitle() == "attnviz — all-MiniLM-L6-v2"
        assert w.grid.isVisible() and w.grid.img.image is not None
        assert w.state.result.attentions.shape[:2] == (6, 12)
        assert banner.isVisible(), "the fallback to auto is not said"
        shown = banner.text()
        assert "memory budget is auto now" in shown and "Models > Memory budget" in shown
        assert "No model is loaded" not in shown and "Could not load" not in shown
        assert shown.count("auto now") == 1
        assert MB.chosen_budget() is None
        assert QSettings(settings_path, QSettings.Format.IniFormat).value("memory_budget") == "auto"

        offered, warned = [], []
        monkeypatch.setattr(QInputDialog, "getText",
                            lambda *a, **k: (offered.append(k["text"]), (k["text"], True))[1])
        monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: warned.append(a[2]))
        w.menus.memory_budget_action.trigger()  # OK on what the dialog offers
        assert offered == ["auto"] and warned == []

        w.set_text("the keys to the cabinet")  # said once: the next result leaves it be, and a
        wait_for_text(qtbot, w, "the keys to the cabinet")  # new load does not say it again
        w.worker.wait_idle()
        with qtbot.waitSignal(w.state.sigLoadReported, timeout=30000):
            w.load_model("all-MiniLM-L6-v2")
        assert "auto now" not in banner.text() or not banner.isVisible()
    finally:
        MB.set_memory_budget(None)


def test_the_dialog_never_offers_a_budget_it_would_refuse(window, monkeypatch):
    """A remembered 1K (below one of MiniLM's layers: the window kept another budget, as when
    --memory-budget chose it) or bare 512 is not what the dialog starts with; 8M is."""
    offered = []
    monkeypatch.setattr(QInputDialog, "getText",
                        lambda *a, **k: (offered.append(k["text"]), ("", False))[1])
    for saved in ("1K", "512", "8M"):
        window.settings.setValue("memory_budget", saved)
        window.menus.memory_budget_action.trigger()
    assert offered == ["auto", "auto", "8M"]


def test_a_view_opened_with_no_model_on_screen_survives_the_fallback_to_auto(
        window, qtbot, tmp_path, settings_path):
    """No model on screen (the last load failed) and a budget below one layer: File > Open view
    of a MiniLM view loads MiniLM with the budget auto, then shows the view's layer."""
    from attnviz.ui.app import create_window
    from test_open_view_models import sidecar

    path = sidecar(window, tmp_path, "all-MiniLM-L6-v2", layer=3)
    w = create_window(settings=QSettings(str(tmp_path / "none.ini"), QSettings.Format.IniFormat),
                      model=str(tmp_path / "no-such-model"))
    qtbot.addWidget(w)
    w.show()
    qtbot.waitUntil(lambda: widget(w, "error_banner").isVisible() and not w.state.loading, timeout=30000)
    assert w.state.model is None
    try:
        MB.set_memory_budget(1024)
        w.open_view(path)
        qtbot.waitUntil(lambda: w.state.model is not None and w.state.result is not None, timeout=30000)
        assert "memory budget is auto now" in widget(w, "error_banner").text()
        qtbot.waitUntil(lambda: w.state.layer == 3, timeout=30000)
    finally:
        MB.set_memory_budget(None)


def test_the_banner_names_the_remembered_budget_as_the_refusal_does(qtbot, settings_path):
    """2046 bytes: "1.99 KiB" rounded down, as the refusal says it; rounded to nearest it would
    read "2 KiB", a budget larger than the one refused."""
    QSettings(settings_path, QSettings.Format.IniFormat).setValue("memory_budget", "1.999K")
    try:
        w = open_window(qtbot, settings_path)
        shown = widget(w, "error_banner").text()
        assert "remembered memory budget (1.99 KiB) is less than one layer" in shown, shown
    finally:
        MB.set_memory_budget(None)
