"""The window opened on the bundled MiniLM folder by its path (--model PATH, or Ctrl+O on its
config.json) names the model in its title as when opened by name, not "model" (the folder's own
name on disk)."""

from attnviz.engine.reading.registry import DEFAULT_MODEL, resolve
from windows import open_window


def test_the_title_names_the_bundled_folder_opened_by_path(qtbot, settings_path):
    path = resolve(DEFAULT_MODEL)[1] / "config.json"
    w = open_window(qtbot, settings_path, model=str(path))
    try:
        assert w.windowTitle() == f"attnviz — {DEFAULT_MODEL}"
    finally:
        w.worker.wait_idle()
