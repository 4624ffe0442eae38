"""Fixtures of the window tests: a per-test settings file, the window opened on MiniLM, SmolLM2's
file for a window without a second read of it, and the window with its Patching tab on the toy
decoder."""

import pytest

from windows import IOI, TOY, open_window


@pytest.fixture
def settings_path(tmp_path):
    return str(tmp_path / "settings.ini")


@pytest.fixture
def window(qtbot, settings_path):
    w = open_window(qtbot, settings_path)
    yield w
    w.worker.wait_idle()


@pytest.fixture
def smollm2_source(smollm2, monkeypatch):
    """SmolLM2's file, for a window to open (model=...): the window's load of that file gives a
    Model of its own (its own KV cache and prediction head) on the session's weights and tokenizer
    instead of reading the file again, unless a memory budget is chosen. Opening the file itself
    is tested in test_ui_gguf.py."""
    from pathlib import Path

    import attnviz.engine as engine
    from attnviz.engine.computing.model import Model
    from attnviz.engine.reading.budget import chosen_budget

    real = engine.load_model

    def load_model(source, *args, **kwargs):
        if Path(str(source)) != Path(smollm2.path) or args or kwargs or chosen_budget() is not None:
            return real(source, *args, **kwargs)
        s = smollm2
        return Model(s.name, s.path, s.config, s.weights, s.tokenizer, license=s.license, notice=s.notice)

    monkeypatch.setattr(engine, "load_model", load_model)
    return str(smollm2.path)


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
