"""The window's menu bar, the Models menu and the About text. The menus call the window's actions
(open, export, about) and write view changes through AppState's setters; the Models menu is a view of the job
runner's model scans and of the state's current model."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QLabel, QMenu, QMessageBox

from attnviz.engine.reading.token_text import plural
from attnviz.engine.reading import textbook
from attnviz.ui.views.fields import menu_text, plain_tip


class ModelsMenu(QMenu):
    """What can be opened. Each opening scans again on the job runner (the Hugging Face cache and
    the GGUF stores are file reads that must not hold the event loop); meanwhile the last list, or
    a placeholder, shows. The check mark names the model shown now."""

    def __init__(self, state, worker, open_model, extra=(), parent=None):
        """open_model(name or path) opens an entry; `extra`: actions after the list."""
        super().__init__("&Models", parent)
        self.state, self.worker, self.open_model = state, worker, open_model
        self.infos = None  # the last scan (find_models), None before the first
        self.extra: list[QAction] = list(extra)
        self.aboutToShow.connect(self._on_opening)
        worker.sigModelsFound.connect(self._on_found)
        self.fill()

    def _on_opening(self) -> None:
        self.worker.discover()
        self.fill()  # the last scan's list (check marks as of now) until the new one

    def _on_found(self, infos) -> None:
        self.infos = infos
        self.fill()

    def fill(self) -> None:
        self.clear()
        infos = self.infos
        if infos is None:
            self.addAction("(looking for models…)").setEnabled(False)
            infos = []
        elif not infos:
            self.addAction("(no models found)").setEnabled(False)
        current = self.state.model
        for info in infos:
            act = self.addAction(
                menu_text(f"{info.name}  ({model_shape(info.family, info.n_layer, info.n_head, info.n_kv_head)})"))
            act.setToolTip(str(info.path))
            act.setCheckable(True)
            act.setChecked(current is not None and (
                info.name == current.name or str(info.path) == str(current.path)))
            act.triggered.connect(lambda _=False, p=str(info.path), n=info.name: self.open_model(n or p))
        self.addSeparator()
        for act in self.extra:
            self.addAction(act)


class Menus:
    """File, Samples, Models, View and Help on window `w`'s menu bar, their actions held here (the
    window holds this object: `w.menus`). Each calls one of the window's actions or a setter of the
    state; every shortcut is also the window's own action, so it works whichever widget has the focus."""

    def __init__(self, w, samples_menu: QMenu):
        mb = w.menuBar()
        file_menu = mb.addMenu("&File")
        # (the window's, not the menu's: the Models menu shows them too, and its refill would
        # delete actions a menu owns)
        self.open_folder_action = QAction("&Open model…", w)
        file_menu.addAction(self.open_folder_action)
        self.open_folder_action.setShortcut(QKeySequence("Ctrl+O"))
        self.open_folder_action.setToolTip("A .gguf file, or a Hugging Face folder: pick its config.json "
                                           "or a .safetensors file and the folder opens")
        self.open_folder_action.triggered.connect(lambda: ask_model(w))
        self.open_file_action = QAction("Open model &file (GGUF)…", w)
        file_menu.addAction(self.open_file_action)
        self.open_file_action.setShortcut(QKeySequence("Ctrl+Shift+G"))
        self.open_file_action.setToolTip("A .gguf model as llama.cpp, LM Studio and Ollama keep them")
        self.open_file_action.triggered.connect(w.open_model_file)
        self.open_view_action = file_menu.addAction("Open &view…")
        self.open_view_action.setShortcut(QKeySequence("Ctrl+Shift+O"))
        self.open_view_action.setToolTip("Restore a view from an exported image's JSON sidecar")
        self.open_view_action.triggered.connect(w.open_view_dialog)
        self.open_scan_action = file_menu.addAction("Open &scan…")
        self.open_scan_action.setToolTip("A corpus scan's folder (attnviz scan): heads across a corpus")
        self.open_scan_action.triggered.connect(w.open_scan_dialog)
        self.export_action = file_menu.addAction("&Export…")
        self.export_action.setShortcut(QKeySequence("Ctrl+E"))
        self.export_action.triggered.connect(w.export_dialog)
        file_menu.addSeparator()
        self.quit_action = file_menu.addAction("&Quit")
        # the platform's quit keys, and Ctrl+Q everywhere (a platform theme without a quit key,
        # Windows' or the offscreen one, would leave the menu without the key the guide names)
        quit_keys, ctrl_q = QKeySequence.keyBindings(QKeySequence.StandardKey.Quit), QKeySequence("Ctrl+Q")
        self.quit_action.setShortcuts(quit_keys if ctrl_q in quit_keys else [*quit_keys, ctrl_q])
        self.quit_action.triggered.connect(w.close)
        self.file_menu = file_menu
        # also the window's own actions: a native (global) menu bar does not see key presses, and
        # the shortcuts must work whichever widget has the focus, the sentence box included
        for act in (self.open_folder_action, self.open_file_action, self.open_view_action,
                    self.export_action, self.quit_action):
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            w.addAction(act)

        mb.addMenu(samples_menu)

        # File's own open actions, so the Models menu shows their keys too
        folder, gguf = self.open_folder_action, self.open_file_action
        budget = self.memory_budget_action = QAction("Memory &budget…", w)
        budget.setToolTip("How much memory the model's layers may take as float32; a bigger model "
                          "expands the others from its file as they run")
        budget.triggered.connect(lambda: ask_memory_budget(w))
        self.models_menu = ModelsMenu(w.state, w.worker, w.load_model, (folder, gguf, budget), w)
        from attnviz.ui.panels.compare_menu import CompareMenu

        self.compare_menu = CompareMenu(w, self.models_menu)  # model B beside this one
        compare = self.compare_action = QAction("&Compare with\u2026", w)  # the window's: a refill keeps it
        compare.setMenu(self.compare_menu)
        self.models_menu.extra.append(compare)
        self.models_menu.fill()
        mb.addMenu(self.models_menu)

        view = self.view_menu = mb.addMenu("&View")
        st = w.state
        self.prev_layer_action = QAction("&Previous layer", w)
        self.prev_layer_action.setShortcuts([QKeySequence("PgUp"), QKeySequence("Ctrl+Up")])
        self.prev_layer_action.triggered.connect(lambda: st.set_layer(st.layer - 1))
        self.next_layer_action = QAction("&Next layer", w)
        self.next_layer_action.setShortcuts([QKeySequence("PgDown"), QKeySequence("Ctrl+Down")])
        self.next_layer_action.triggered.connect(lambda: st.set_layer(st.layer + 1))
        self.clear_query_action = QAction("&Clear query token", w)
        self.clear_query_action.setShortcut(QKeySequence("Esc"))
        self.clear_query_action.setToolTip("Esc: while a model loads, stop waiting for it; "
                                           "otherwise clear the query token")
        self.clear_query_action.triggered.connect(w.escape)
        for act in (self.prev_layer_action, self.next_layer_action, self.clear_query_action):
            act.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            view.addAction(act)
            w.addAction(act)
        view.addSeparator()
        view.addAction(w.focus_dock.toggleViewAction())

        self.help_menu = mb.addMenu("&Help")
        self.keys_action = self.help_menu.addAction("&Keys and mouse")
        self.keys_action.setShortcut(QKeySequence("F1"))
        self.keys_action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        self.keys_action.triggered.connect(w.show_keys)
        w.addAction(self.keys_action)
        self.about_action = self.help_menu.addAction("&About attnviz")
        self.about_action.triggered.connect(w.show_about)


def ask_memory_budget(w) -> None:
    """Models > Memory budget: a size (2G, 512M) or auto, applied to the loaded model at once and
    to the models opened later, and remembered (ui/machinery/settings.py). With Compare's B open,
    a size holds A and B together, split as when B opened, and auto the memory available, split
    as B opening under auto splits it (CompareJobs.share_budget)."""
    from PySide6.QtWidgets import QInputDialog, QMessageBox

    from attnviz.engine.errors import AttnvizError
    from attnviz.engine.reading.memory_budget import set_memory_budget
    from attnviz.engine.reading.typed_budget import parse_typed_budget
    from attnviz.ui.machinery import settings as remembered

    model = w.state.model
    now = (model.memory if model is not None else None) or "no model loaded"
    text, ok = QInputDialog.getText(
        w, "Memory budget", "Float32 layers to keep expanded: a size such as 2G or 512M, or auto "
        "(the memory available, less 1 GiB and what the model needs besides its layers). The "
        f"results are the same.{_WITH_B if _b_open(w) else ''}\nNow: {now}",
        text=budget_to_offer(w.settings, model))
    if not ok:
        return
    try:
        n = parse_typed_budget(text)  # a bare 512 is refused: 512 bytes, not the 512M meant
        compare = getattr(w.worker, "compare_jobs", None)
        if model is not None and not (compare is not None and compare.share_budget(n)):
            model.set_memory_budget(n)
    except AttnvizError as exc:
        QMessageBox.warning(w, "Memory budget", plain_tip(str(exc)))  # (it quotes what was typed)
        return
    set_memory_budget(n)
    remembered.remember_memory_budget(w.settings, text)


_WITH_B = (" With Compare open, a size, or auto's memory available, holds model A and model B "
           "together: B gets what A holds now leaves of a size, A the rest; under auto A gets "
           "what it holds or its share (in proportion to the two models' float32 layers, at most "
           "all of A's), whichever is more, B the rest.")


def _b_open(w) -> bool:
    compare = getattr(w.worker, "compare_jobs", None)
    return compare is not None and compare.budget_shared


def budget_to_offer(settings, model) -> str:
    """What the Memory budget dialog starts with: the remembered budget, or auto where the dialog
    would refuse that (below one layer of the loaded model: the command line chose another)."""
    from attnviz.engine.reading.memory_budget import parse_budget
    from attnviz.ui.machinery import settings as remembered

    text = remembered.saved_memory_budget(settings)  # (auto, where not a size the dialog takes)
    n = parse_budget(text)
    sizes = getattr(model.unchecked_weights.layers, "sizes", ()) if model is not None else ()
    return "auto" if n is not None and n < max(sizes, default=0) else text


# what File > Open model (Ctrl+O) lists: a GGUF file, or the files that mark a Hugging Face folder
MODEL_FILES = ("*.gguf", "config.json", "*.safetensors")


def ask_model(w) -> None:
    """File > Open model (Ctrl+O): one picker for a model however it is stored, a .gguf file or a
    Hugging Face folder's config.json or .safetensors file, the picked file itself handed to the load
    (registry.resolve opens a folder's file as its folder, a GGUF without its extension as GGUF, and
    refuses any other file by its name: never a model beside it)."""
    path, _ = QFileDialog.getOpenFileName(
        w, "Open a model: a .gguf file, or a Hugging Face folder's config.json", "",
        f"Models ({' '.join(MODEL_FILES)});;GGUF models (*.gguf);;"
        "Hugging Face folders (config.json *.safetensors);;All files (*)")
    if path:
        w.load_model(path)


def model_shape(family: str, n_layer: int, n_head: int, n_kv_head: int) -> str:
    """`llama, 30 layers × 9 heads, 3 KV heads` (the KV heads only when fewer than the heads)."""
    kv = f", {plural(n_kv_head, 'KV head')}" if n_kv_head != n_head else ""
    return f"{family}, {plural(n_layer, 'layer')} × {plural(n_head, 'head')}{kv}"


# Help > Keys and mouse: every key of the menus and the window, and what the mouse does where
KEYS = (
    ("PgUp / PgDown, Ctrl+Up / Ctrl+Down", "previous or next layer"),
    ("arrow keys (the grid focused)", "move the focus between heads"),
    ("Esc", "clear the query; while a model loads, stop waiting for it"),
    ("Ctrl+O", "open a model: a .gguf file, or a Hugging Face folder's config.json or .safetensors"),
    ("Ctrl+Shift+G", "open a model file (GGUF only)"),
    ("Ctrl+Shift+O", "open a saved view"),
    ("Ctrl+E", "export"),
    ("Ctrl+Q", "quit"),
    ("F1", "this list"),
)
MOUSE = (
    ("click a token in the strip", "make it the query: its row is outlined in every head (click "
                                   "it again to clear)"),
    ("click a head in the grid", "show it large in the Focus head tab"),
    ("Shift+click a cell in the grid, or click a cell of the focus view", "make its row's token the query"),
    ("Alt+click a head in the grid", "switch it off (again: back on)"),
    ("right-click a head in the grid", "a menu: switch it off (zero, or its mean over this text in the clean run) or "
                                       "back on, knock out the cell's query → key in this layer or "
                                       "every layer, restore the clean run"),
    ("right-click a cell of the focus view", "Why here?: what the score is made of"),
    ("hover a cell", "read the query, the key and the weight"),
)


def show_keys(w) -> None:
    """Help > Keys and mouse: keys_html in a message box wide enough for its two columns (a message
    box is narrow by default: each row wrapped over two to four lines)."""
    box = QMessageBox(QMessageBox.Icon.Information, "Keys and mouse", keys_html(), parent=w)
    text = box.findChild(QLabel, "qt_msgbox_label")
    if text is not None:
        text.setMinimumWidth(560)
    box.exec()


def keys_html() -> str:
    """Help > Keys and mouse: KEYS and MOUSE as two tables."""
    def table(rows) -> str:
        return "<table cellspacing=4>" + "".join(
            f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>" for k, v in rows) + "</table>"

    return f"<h3>Keys</h3>{table(KEYS)}<h3>Mouse</h3>{table(MOUSE)}"


def about_html(model) -> str:
    """Help > About: the version, and the loaded model's name, shape, licence and folder (its file,
    for a GGUF)."""
    from attnviz import __version__

    if model is None:
        text = "No model loaded."
    else:
        c = model.config
        text = (f"Model: <b>{html.escape(model.name)}</b> "
                f"({model_shape(c.family, c.n_layer, c.n_head, c.n_kv_head)})<br>Licence: "
                f"{html.escape(model.license or 'not stated in the model folder')}<br>"
                f"{'File' if Path(model.path).is_file() else 'Folder'}: {html.escape(str(model.path))}")
        if model.name == textbook.TEXTBOOK_NAME:
            text += f"<br>{html.escape(textbook.vocabulary_line())}"
    return (f"<h3>attnviz {__version__}</h3><p>Multi-head attention of real models, computed "
            f"by attnviz's own NumPy engine.</p><p>{text}</p>")
