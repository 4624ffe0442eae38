"""`attnviz` with no command opens the window on its default model (SmolLM2) and the given text."""

from windows import WAIT


def test_cli_without_a_command_opens_the_window_on_its_default_model(qtbot, monkeypatch):
    from PySide6.QtWidgets import QApplication

    from attnviz import cli
    from attnviz.ui import app as app_module

    made = []
    real_create = app_module.create_window

    def create(*a, **kw):
        made.append(real_create(*a, **kw))
        qtbot.addWidget(made[-1])
        return made[-1]

    def fake_exec(*_):
        w = made[0]
        qtbot.waitUntil(lambda: w.state.result is not None, timeout=WAIT)
        return 0

    monkeypatch.setattr(app_module, "create_window", create)
    monkeypatch.setattr(QApplication, "exec", fake_exec)
    assert cli.main(["--text", "Opened from the command line."]) == 0
    w = made[0]
    assert w.isVisible() and w.state.model_name == "SmolLM2-135M-Instruct"
    assert w.state.result.text == "Opened from the command line."
    w.worker.wait_idle()
