"""Remembered settings: one module that binds AppState to QSettings. `restore` applies what was
saved (anything unreadable falls back to the default), `bind` writes the values back once the
state's changes pause, and at exit. Below them, what the window keeps of its own (the model
source, geometry, dock layout and the tab raised in each group of docks), the fields of the
Calculator and Generate panels and the export dialog's last choices: every key the app writes is
in this module."""

from __future__ import annotations

import atexit
import math

from PySide6.QtCore import QByteArray, QObject, QSettings, QThread, QTimer, Signal, Slot

from attnviz.engine.computing.patterns import SCALE_MODES
from attnviz.figures.data import COLORMAPS
from attnviz.ui.machinery.state import DISPLAY_DEFAULTS, VIEW_MODES


def app_settings() -> QSettings:
    """The user's settings (~/.config/attnviz/attnviz.conf on Linux): what the window, its export
    dialog and File > Open view share unless a caller gives its own (tests give a temporary file)."""
    return QSettings("attnviz", "attnviz")


def _bool(value, default: bool) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return True if text == "true" else False if text == "false" else default


def _choice(value, choices, default: str) -> str:
    return str(value) if str(value) in choices else default


def read_display(settings: QSettings) -> dict:
    """The saved display settings, each checked: a bad value (a hand-edited file, an older
    version's name) gives the default, never an exception."""
    s, d = settings, DISPLAY_DEFAULTS
    try:
        layer = max(0, int(s.value("layer", d["layer"])))
    except (TypeError, ValueError):
        layer = d["layer"]
    return {
        "colormap": _choice(s.value("colormap", d["colormap"]), COLORMAPS, d["colormap"]),
        "scale_mode": _choice(s.value("scale_mode", d["scale_mode"]), SCALE_MODES, d["scale_mode"]),
        "view_mode": _choice(s.value("view_mode", d["view_mode"]), VIEW_MODES, d["view_mode"]),
        "hide_first": _bool(s.value("hide_first", d["hide_first"]), d["hide_first"]),
        "value_weighted": _bool(s.value("value_weighted", d["value_weighted"]), d["value_weighted"]),
        "layer": layer,
    }


def restore(state, settings: QSettings) -> None:
    """Apply the saved display settings to `state` (read all first: each setter writes back)."""
    v = read_display(settings)
    state.set_colormap(v["colormap"])
    state.set_scale_mode(v["scale_mode"])
    state.set_view_mode(v["view_mode"])
    state.set_hide_first(v["hide_first"])
    state.set_value_weighted(v["value_weighted"])
    state.set_layer(v["layer"])


def display_values(state) -> dict:
    """The display options as the settings keep them."""
    return {"colormap": state.colormap, "scale_mode": state.scale_mode, "view_mode": state.view_mode,
            "hide_first": state.hide_first, "value_weighted": state.value_weighted}


WRITE_DELAY_MS = 1000  # text, layer and display options are written once changes pause this long


class _Sink(QObject):
    """The settings written while the window runs, on a thread of their own (Background).

    A QSettings file is written by Qt through QSaveFile: the bytes, fsync, a rename. PySide holds
    the GIL through QSettings.sync(), so every other thread's Python waits for the fsync, and on a
    busy disk that fsync would stall the window's thread right as typing resumed. Here each file's QSettings lives on this thread and Qt syncs it from
    this thread's event loop in C++ (QSettings's own update event), without the GIL: the window's
    thread only hands over the values."""

    sigValues = Signal(str, object, object)  # file name, QSettings.Format, {key: value}
    sigClose = Signal()

    def __init__(self):
        super().__init__()
        self._files: dict = {}  # (file name, format) -> QSettings, made on this thread
        self.sigValues.connect(self._write)
        self.sigClose.connect(self._close)

    @Slot(str, object, object)
    def _write(self, name: str, fmt, values: dict) -> None:
        s = self._files.get((name, fmt))
        if s is None:
            s = self._files[name, fmt] = QSettings(name, fmt)
        for key, value in values.items():
            s.setValue(key, value)  # Qt syncs the file from this thread's event loop

    @Slot()
    def _close(self) -> None:  # the last values synced (each QSettings' destructor), then the loop ends
        self._files.clear()
        QThread.currentThread().quit()


class Background:
    """The one thread that writes settings while the window runs (_Sink), started when first used
    and finished by `finish` (a window's close, Writer.flush, the interpreter's exit)."""

    _thread: QThread | None = None
    _sink: _Sink | None = None

    @classmethod
    def write(cls, settings: QSettings, values: dict) -> None:
        if cls._thread is None:
            cls._sink, cls._thread = _Sink(), QThread()
            cls._sink.moveToThread(cls._thread)
            cls._thread.start()
        cls._sink.sigValues.emit(settings.fileName(), settings.format(), dict(values))

    @classmethod
    def finish(cls) -> None:
        """Every value handed over is in its file when this returns, and the thread is gone."""
        thread, sink = cls._thread, cls._sink
        if thread is None:
            return
        cls._thread = cls._sink = None
        sink.sigClose.emit()  # after every write handed over before it (one queue, in order)
        thread.wait()


atexit.register(Background.finish)


class Writer(QObject):
    """Writes the state's text, layer and display options to `settings` once changes pause
    (WRITE_DELAY_MS: typing writes nothing per keystroke), on the settings thread (_Sink: no fsync
    on the window's thread), and at `flush` (the window's close) on the caller's thread, after
    the settings thread's writes; a new model is remembered at once."""

    def __init__(self, state, settings: QSettings, parent: QObject | None = None):
        super().__init__(parent if parent is not None else state)
        self.state, self.settings = state, settings
        self.panels: dict = {}  # group -> a panel whose fields are written under it (keep_fields)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.setInterval(WRITE_DELAY_MS)
        self.timer.timeout.connect(self._write_later)
        for sig in (state.sigTextChanged, state.sigLayerChanged, state.sigDisplayChanged):
            # not connected to timer.start itself: sigLayerChanged's int would go to start(msec)
            # and make the new layer the delay (a write, and its fsync, on every keystroke)
            sig.connect(lambda *_: self.timer.start())
        state.sigModelChanged.connect(
            lambda model: model is not None and remember_model(settings, state.model_source))

    @property
    def pending(self) -> bool:
        return self.timer.isActive()

    def values(self) -> dict:
        st = self.state
        fields = {f"{group}/{key}": value for group, panel in self.panels.items()
                  for key, value in panel.fields().items()}
        return {"text": st.text, "layer": st.layer, **display_values(st), **fields}

    def keep_fields(self, group: str, panel) -> None:
        """`panel`'s fields (its fields(), a dict) written under `group/` from now on, with the rest,
        once its sigFieldsChanged pauses."""
        self.panels[group] = panel
        panel.sigFieldsChanged.connect(lambda: self.timer.start())

    def _write_later(self) -> None:  # changes paused: the settings thread writes them
        if self.settings.fileName():
            Background.write(self.settings, self.values())
        else:
            self.flush()

    def flush(self) -> None:
        """Write what changed now, on this thread, after what the settings thread was given."""
        self.timer.stop()
        Background.finish()
        for key, value in self.values().items():
            self.settings.setValue(key, value)


def bind(state, settings: QSettings) -> Writer:
    """From now on the text, layer and display options are written to `settings` once changes
    pause, and the model at once; the Writer's flush writes at once (at exit)."""
    return Writer(state, settings)


# --- what the window keeps of its own: the model, the text, its geometry and docks -----------------

def saved_model(settings: QSettings) -> str:
    """The model source the window opens when none is given: the last one loaded, else the
    registry's WINDOW_MODEL (a first start)."""
    from attnviz.engine.reading.registry import WINDOW_MODEL

    return str(settings.value("model", WINDOW_MODEL))


def remember_model(settings: QSettings, source: str) -> None:
    settings.setValue("model", str(source))


def saved_text(settings: QSettings) -> str:
    from attnviz.engine.reading.registry import DEFAULT_TEXT

    return str(settings.value("text", DEFAULT_TEXT))


def restore_window(window, settings: QSettings) -> bool:
    """Geometry and dock layout as they were saved; False when there was none (a first start)."""
    geometry, docks = settings.value("geometry"), settings.value("window_state")
    if isinstance(geometry, QByteArray) and not geometry.isEmpty():
        window.restoreGeometry(geometry)
    if isinstance(docks, QByteArray) and not docks.isEmpty():
        return bool(window.restoreState(docks))
    return False


def _focus_tab(window):
    """The Focus head tab's own dock area (Why here? below the focus view), None where the window
    has no Why here? (ui/panels/why_panel.py)."""
    from PySide6.QtWidgets import QMainWindow

    inner = window.focus_dock.widget() if getattr(window, "focus_dock", None) is not None else None
    return inner if isinstance(inner, QMainWindow) else None


def restore_focus_tab(inner, settings: QSettings) -> bool:
    """The Focus head tab's docks as they were saved; False when there was none."""
    state = settings.value("focus_tab_state")
    return isinstance(state, QByteArray) and not state.isEmpty() and bool(inner.restoreState(state))


def save_window(window, settings: QSettings) -> None:
    settings.setValue("geometry", window.saveGeometry())
    settings.setValue("window_state", window.saveState())
    if (inner := _focus_tab(window)) is not None:
        settings.setValue("focus_tab_state", inner.saveState())
    settings.setValue("raised_tabs", ",".join(raised_tabs(window)))
    settings.sync()


def remember_docks(window, settings: QSettings) -> None:
    """The docks as they are now (their layout, floating ones included, and the raised tabs),
    written at once where they changed: a crash keeps a dock the user floated out as well as a
    tab raised."""
    value, state = ",".join(raised_tabs(window)), window.saveState()
    inner = _focus_tab(window)
    tab = inner.saveState() if inner is not None else None
    if (settings.value("raised_tabs", "") != value or settings.value("window_state") != state
            or (tab is not None and settings.value("focus_tab_state") != tab)):
        settings.setValue("geometry", window.saveGeometry())
        settings.setValue("window_state", state)
        settings.setValue("raised_tabs", value)
        if tab is not None:
            settings.setValue("focus_tab_state", tab)
        settings.sync()


def raised_tabs(window) -> list[str]:
    """The object name of each dock on top where it is: the dock whose tab is raised in each group
    of tabbed docks on screen (a tab shows its dock's title, and the docks' titles are distinct),
    then each dock floated out of the window and shown."""
    from PySide6.QtWidgets import QDockWidget, QTabBar

    all_docks = window.findChildren(QDockWidget)
    docks = {d.windowTitle(): d.objectName() for d in all_docks if not d.isFloating()}
    bars = [b for b in window.findChildren(QTabBar)  # (Qt hides the bars it keeps unused)
            if b.parent() is window and b.isVisible() and b.currentIndex() >= 0]
    tabs = [docks[text] for text in (b.tabText(b.currentIndex()) for b in bars) if text in docks]
    return tabs + [d.objectName() for d in all_docks if d.isFloating() and d.isVisible()]


def saved_raised_tabs(settings: QSettings) -> list[str]:
    """The docks raised in their tab groups when the window last closed ([] before the first
    close); names the window no longer has are the caller's to skip."""
    return [name for name in str(settings.value("raised_tabs", "") or "").split(",") if name]


# --- a side panel's fields: the Calculator's ("calc/"), Generate's ("generate/") -------------------
def saved_fields(settings: QSettings, group: str, types: dict) -> dict:
    """The values saved under `group/` for the keys of `types` ({key: int, float, bool or str}),
    each read as its type; one missing or "" (a field left at its default) is left out, one
    unreadable as its type (a hand-edited file) comes as its text, for the panel to say it could
    not use it. The panel checks the rest (a range, a preset it knows)."""
    out = {}
    for key, kind in types.items():
        value = settings.value(f"{group}/{key}")
        if value is None or str(value) == "":
            continue
        try:
            read = _bool(value, None) if kind is bool else kind(str(value)) if kind is not float \
                else float(value)
        except (TypeError, ValueError):
            read = None
        ok = read is not None and (kind is not float or math.isfinite(read))
        out[key] = read if ok else str(value)
    return out


def keep_fields(window, group: str, panel, types: dict) -> None:
    """`panel`'s fields as they were last written under `group/` (its set_fields shows them), and
    written from now on with the window's other settings (its Writer: once changes pause, and at
    the window's close)."""
    panel.set_fields(saved_fields(window.settings, group, types))
    window.settings_writer.keep_fields(group, panel)


# --- the export dialog's choices ------------------------------------------------------------------
def export_choices(settings: QSettings) -> dict:
    """The last export's folder (a str, "" before the first), format, scope and width (None when
    unreadable: the dialog picks its own)."""
    try:
        width = int(settings.value("export/width"))
    except (TypeError, ValueError):
        width = None
    return {"folder": str(settings.value("export/folder", "") or ""),
            "format": str(settings.value("export/format", "png")),
            "scope": settings.value("export/scope"), "width": width}


def remember_export(settings: QSettings, folder, fmt: str, scope: str, width: int) -> None:
    settings.setValue("export/folder", str(folder))
    settings.setValue("export/format", fmt)
    settings.setValue("export/scope", scope)
    settings.setValue("export/width", int(width))


# --- the memory budget for a model's expanded layers (engine/reading/budget.py) -------------------
def saved_memory_budget(settings: QSettings) -> str:
    """The remembered budget as typed ('4G', 'auto'); anything the dialog would refuse (not a size,
    or a bare number below 1 MiB that an older version saved) gives 'auto'."""
    return "auto" if refused_budget(settings) else _saved_budget_text(settings)


def _saved_budget_text(settings: QSettings) -> str:
    return str(settings.value("memory_budget", "auto") or "auto").strip()


def refused_budget(settings: QSettings) -> str:
    """Why the remembered budget cannot be used, as the dialog would refuse it (typed_budget);
    '' when it can."""
    from attnviz.engine.errors import InputError
    from attnviz.engine.reading.typed_budget import parse_typed_budget

    try:
        parse_typed_budget(_saved_budget_text(settings))
    except InputError as exc:
        return str(exc)
    return ""


def remember_memory_budget(settings: QSettings, text: str) -> None:
    settings.setValue("memory_budget", str(text).strip() or "auto")


# what the window says once it has put a remembered budget that cannot be used back to auto
BUDGET_RESET = ("the memory budget is auto now (the memory available, less 1 GiB and what the model "
                "needs besides its layers), and remembered so; Models > Memory budget sets another")


def apply_memory_budget(settings: QSettings) -> str:
    """Models loaded from now on get the remembered budget, unless the command line chose one.
    A remembered budget the dialog would refuse is put back to auto, remembered so; returns what
    the window says about that once ('' when nothing was changed)."""
    from attnviz.engine.reading.memory_budget import chosen_by_command_line, parse_budget, set_memory_budget

    if chosen_by_command_line():
        return ""
    why = refused_budget(settings)
    if why:
        remember_memory_budget(settings, "auto")
    set_memory_budget(parse_budget(saved_memory_budget(settings)))
    return f"The remembered {why.split(':')[0]}; {BUDGET_RESET}" if why else ""
