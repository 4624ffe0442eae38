"""Models > Compare with… names model B as the window's title names a model: the bundled MiniLM,
picked from the menu's list beside a model of another shape, is refused as "all-MiniLM-L6-v2",
not by its folder's name ("model")."""

from attnviz.engine.reading.registry import TOY_MODEL
from windows import WAIT, toy_window


def test_a_refused_b_is_named_as_the_title_names_it(qtbot, tmp_path):
    w = toy_window(qtbot, tmp_path / "s.ini", "the cat sat")
    try:
        jobs = w.worker.compare_jobs
        with qtbot.waitSignal(w.worker.sigModelsFound, timeout=WAIT):  # the list the menus show
            w.menus.models_menu.aboutToShow.emit()
        menu = w.menus.compare_menu
        menu.fill()
        entry = next(a for a in menu.actions() if a.text() == "all-MiniLM-L6-v2")
        entry.trigger()
        qtbot.waitUntil(lambda: jobs.loading is None and "a pair needs" in jobs.note, timeout=WAIT)
        note = w.compare_panel.note.text()
        assert w.windowTitle().endswith(TOY_MODEL)
        assert note.startswith("Could not compare with all-MiniLM-L6-v2. ")
        assert f"{TOY_MODEL} has" in note and "all-MiniLM-L6-v2 has" in note and " model has" not in note
    finally:
        w.worker.wait_idle()
