"""Remembered settings: one module binds AppState to QSettings."""

from PySide6.QtCore import QSettings

from attnviz.engine import load_model
from attnviz.engine.reading import textbook
from attnviz.engine.reading.registry import WINDOW_MODEL
from attnviz.ui.machinery import settings as S
from attnviz.ui.machinery.state import AppState
from windows import drain_events


def ini(tmp_path):
    return QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)


def test_changes_are_written_and_restored(qapp, tmp_path):
    st = AppState()
    st.set_model(load_model(textbook.TEXTBOOK_NAME))
    s = ini(tmp_path)
    writer = S.bind(st, s)
    st.set_text("the cat sat")
    st.set_layer(1)
    st.set_colormap("magma")
    st.set_scale_mode("per-head")
    st.set_view_mode("all")
    st.set_hide_first(True)
    assert writer.pending and s.value("text") is None  # nothing written per keystroke
    writer.flush()  # once changes pause, or at exit
    s.sync()
    back = AppState()
    back.set_model(st.model)
    S.restore(back, ini(tmp_path))
    assert (back.colormap, back.scale_mode, back.view_mode, back.hide_first, back.layer) == \
        ("magma", "per-head", "all", True, 1)
    assert ini(tmp_path).value("text") == "the cat sat"


def test_bad_saved_values_fall_back_to_the_defaults(qapp, tmp_path):
    s = ini(tmp_path)
    for key, value in (("colormap", "no-such-map"), ("scale_mode", 3), ("view_mode", ""),
                       ("hide_first", "maybe"), ("layer", "x"), ("value_weighted", "[1]")):
        s.setValue(key, value)
    assert S.read_display(s) == S.DISPLAY_DEFAULTS
    st = AppState()
    S.restore(st, s)  # never raises
    assert st.colormap == "viridis" and st.layer == 0


def test_every_setting_the_window_reads_or_writes_goes_through_the_settings_module(qtbot, tmp_path,
                                                                                  monkeypatch):
    """Settings persistence is one module: a window opened, changed, exporting and closed reads
    and writes its QSettings only from attnviz.ui.machinery.settings (the window and the export
    dialog call it)."""
    import inspect

    from attnviz.ui.export import ExportDialog
    from windows import open_window

    callers = []
    for name in ("value", "setValue", "remove", "contains"):
        def spy(self, *args, _real=getattr(QSettings, name), **kwargs):
            callers.append(inspect.currentframe().f_back.f_globals.get("__name__"))
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(QSettings, name, spy)
    w = open_window(qtbot, tmp_path / "s.ini", model=textbook.TEXTBOOK_NAME, text="the cat sat",
                    panels=("calc", "generate"))  # (the side panels that keep settings)
    st = w.state
    st.set_layer(1)
    w.calc_panel.spins["batch"].setValue(2)
    w.generate_panel.seed_spin.setValue(5)
    st.set_colormap("magma")
    st.set_hide_first(True)
    dialog = ExportDialog(st, w, settings=ini(tmp_path))
    qtbot.addWidget(dialog)
    dialog.path_edit.setText(str(tmp_path / "heads.png"))
    assert dialog.do_export()
    w.close()
    w.worker.wait_idle()
    assert "attnviz.ui.machinery.settings" in callers
    assert set(callers) == {"attnviz.ui.machinery.settings"}
    assert ini(tmp_path).value("colormap") == "magma"  # (written: the spy saw the writes)
    assert [str(ini(tmp_path).value(key)) for key in ("calc/batch", "generate/seed")] == ["2", "5"]


def test_window_and_export_choices_round_trip(tmp_path):
    s = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    assert S.saved_model(s) == WINDOW_MODEL and S.export_choices(s) == {
        "folder": "", "format": "png", "scope": None, "width": None}
    S.remember_model(s, "/models/x.gguf")
    S.remember_export(s, tmp_path, "svg", "layer", 1800)
    assert S.saved_model(s) == "/models/x.gguf"
    assert S.export_choices(s) == {"folder": str(tmp_path), "format": "svg", "scope": "layer", "width": 1800}
    s.setValue("export/width", "wide")  # a hand-edited file: the dialog's own default instead
    assert S.export_choices(s)["width"] is None


def test_the_memory_budget_is_remembered_and_applied_unless_the_command_line_chose_one(tmp_path):
    from attnviz.engine.reading import memory_budget as MB

    s = QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat)
    try:
        assert S.saved_memory_budget(s) == "auto"
        S.remember_memory_budget(s, " 4G ")
        assert S.saved_memory_budget(s) == "4G"
        S.apply_memory_budget(s)
        assert MB.chosen_budget() == 4 << 30
        MB.set_memory_budget(2 << 30, command_line=True)  # --memory-budget 2G wins for the session
        S.apply_memory_budget(s)
        assert MB.chosen_budget() == 2 << 30
        MB.set_memory_budget(None)
        s.setValue("memory_budget", "lots")  # a hand-edited file: auto
        assert S.saved_memory_budget(s) == "auto"
        S.apply_memory_budget(s)
        assert MB.chosen_budget() is None
    finally:
        MB.set_memory_budget(None)


FSYNC_S = 1.0  # every fsync made this slow: a sync on the window's thread stops it at least this long
STALL_S = FSYNC_S / 2  # the longest stop allowed: a loaded machine's scheduling stays well below it
SLOW_FSYNC = r"""
#define _GNU_SOURCE
#include <unistd.h>
#include <sys/syscall.h>
int fdatasync(int fd) { usleep(%(us)d); return syscall(SYS_fdatasync, fd); }
int fsync(int fd) { usleep(%(us)d); return syscall(SYS_fsync, fd); }
"""

PAUSE_CHILD = r"""
import sys, time
from PySide6.QtCore import QCoreApplication, QSettings, QTimer
from attnviz.ui.machinery import settings as S
from attnviz.ui.machinery.state import AppState
app = QCoreApplication([])
path = sys.argv[1]
t0 = time.perf_counter()
probe = QSettings(path + ".probe", QSettings.Format.IniFormat)
probe.setValue("x", 1)
probe.sync()  # on this thread: the shim's fsync is felt here
direct = time.perf_counter() - t0
st = AppState()
writer = S.bind(st, QSettings(path, QSettings.Format.IniFormat))
st.set_text("typed, then a pause")
gaps, last = [0.0], [time.perf_counter()]
def tick():
    now = time.perf_counter()
    gaps[0] = max(gaps[0], now - last[0])
    last[0] = now
timer = QTimer()
timer.setInterval(1)
timer.timeout.connect(tick)
timer.start()
QTimer.singleShot(S.WRITE_DELAY_MS + 1500, app.quit)
app.exec()
writer.flush() if not hasattr(S, "Background") else S.Background.finish()
print(direct, gaps[0], QSettings(path, QSettings.Format.IniFormat).value("text"))
"""


def test_a_typing_pause_writes_the_settings_off_the_window_thread(tmp_path):
    """Every fsync made FSYNC_S slow (a preloaded shim, as a busy disk makes it): a direct
    QSettings.sync() on the window's thread waits for it, the text written once typing pauses
    reaches the file all the same, and the window's thread never waits over STALL_S meanwhile (its
    timer ticks on; a sync run on it would stop it for a whole fsync or more)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    cc = shutil.which("gcc") or shutil.which("cc")
    assert cc, "a C compiler builds the slow-fsync shim"
    (tmp_path / "slow.c").write_text(SLOW_FSYNC % {"us": int(FSYNC_S * 1e6)})
    shim = tmp_path / "slow.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(shim), str(tmp_path / "slow.c")], check=True)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "LD_PRELOAD": str(shim), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", PAUSE_CHILD, str(tmp_path / "s.ini")], env=env,
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr
    direct, worst, text = out.stdout.split(maxsplit=2)
    assert float(direct) >= FSYNC_S  # the shim works: a sync on this thread waits
    assert text.strip() == "typed, then a pause"
    assert float(worst) < STALL_S, f"the window's thread waited {float(worst) * 1e3:.0f} ms"


def test_a_layer_change_leaves_the_write_delay_alone(qapp, qtbot, tmp_path, monkeypatch):
    """Changing the layer (sigLayerChanged carries the layer) restarts the pause timer with its own
    delay: before, the layer became the timer's interval in ms (layer 29 on SmolLM2: the settings
    were written, fsync and all, on every keystroke)."""
    monkeypatch.setattr(S, "WRITE_DELAY_MS", 600_000)  # no stall of a loaded machine ends the pause
    st = AppState()
    st.set_model(load_model(textbook.TEXTBOOK_NAME))
    s = ini(tmp_path)
    writer = S.bind(st, s)
    st.set_layer(1)
    for text in ("t", "th", "the"):
        st.set_text(text)
        assert writer.pending and writer.timer.interval() == S.WRITE_DELAY_MS
    drain_events()  # everything due now has run: nothing written before the pause
    assert writer.pending and writer.timer.isActive() and s.value("text") is None
    writer.flush()
    assert s.value("text") == "the" and int(s.value("layer")) == 1
