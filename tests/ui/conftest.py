"""Fixtures of the window tests: a per-test settings file, the window opened on MiniLM, windows on
the textbook decoder opened on a settings file again and again (restarts), the window with its
Patching tab on the toy decoder, the Calculator's panel on its own, and the bundled models read
once a session."""

import pytest

from windows import CAT, IOI, TEXTBOOK, TOY, WAIT, open_window, toy_window


@pytest.fixture(autouse=True)
def _bundled_models_read_once(shared_loads, monkeypatch):
    """The window's loads of MiniLM and SmolLM2 (attnviz.engine.load_model, looked up at each load)
    give a new Model over the arrays read once (tests/shared_models.py)."""
    import attnviz.engine

    monkeypatch.setattr(attnviz.engine, "load_model", shared_loads)


@pytest.fixture
def settings_path(tmp_path):
    return str(tmp_path / "settings.ini")


@pytest.fixture
def window(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    yield w
    w.worker.wait_idle()


@pytest.fixture
def textbook_window(qtbot):
    """Opens windows on the textbook decoder and the cat sentence: textbook_window(path, shown=True,
    ready=False, **kw) with its settings in the INI file `path` (one opened again is a restart),
    shown unless told, and with its first result and side panels in where `ready`; `kw`:
    create_window's (panels)."""
    from PySide6.QtCore import QSettings

    from attnviz.ui.app import create_window

    def make(path, shown: bool = True, ready: bool = False, **kw):
        w = create_window(model=TEXTBOOK, text=CAT,
                          settings=QSettings(str(path), QSettings.Format.IniFormat), **kw)
        qtbot.addWidget(w)
        if shown:
            w.show()
        if ready:
            qtbot.waitUntil(lambda: w.state.result is not None and w.panels_ready, timeout=WAIT)
        return w
    return make


@pytest.fixture
def patching_window(qtbot, tmp_path):
    """The window on the toy decoder with the Patching tab shown (both Patching test files)."""
    w = open_window(qtbot, tmp_path / "p.ini", model=TOY, text=IOI, panels=("patching",))
    w.patching_dock.show()
    w.patching_dock.raise_()
    w.resize(1400, 1000)
    yield w
    w.patch_jobs.cancel()
    w.worker.wait_idle()


@pytest.fixture
def calc_panel(qtbot):
    """The Calculator tab's panel on its own, shown tall enough for all its sections."""
    from attnviz.ui.panels.calc_panel import CalcPanel

    w = CalcPanel()
    qtbot.addWidget(w)
    w.resize(420, 900)
    w.show()
    return w


@pytest.fixture
def toy_compare_window(qtbot, tmp_path):
    """toy_compare_window(text): a window on the toy decoder and `text` (windows.toy_window), its
    comparison closed and its worker idle when the test ends."""
    made = []

    def make(text):
        made.append(toy_window(qtbot, tmp_path / "s.ini", text))
        return made[-1]

    yield make
    for w in made:
        w.worker.compare_jobs.close()
        w.worker.wait_idle()


@pytest.fixture
def auto_budget_compare_window(toy_compare_window):
    """toy_compare_window with the memory budget on auto before the test and after it."""
    from attnviz.engine.reading import memory_budget as MB

    MB.set_memory_budget(None)
    yield toy_compare_window
    MB.set_memory_budget(None)
