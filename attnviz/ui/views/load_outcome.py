"""What the window says when a load ends (AppState.report_load): loaded (and a view that waited for
that model is opened), failed (the banner, and what stays on screen) or cancelled."""

from __future__ import annotations

from attnviz.ui.views.notices import sentence


def report_load(w, source: str, outcome: str, message: str) -> None:
    """The outcome of a load of `source` in window `w`: loaded, failed or cancelled."""
    fallback, w.start_fallback = w.start_fallback, None  # (for the first outcome only)
    if outcome == "loaded":
        loaded(w, w.state.model)
    elif outcome == "failed":
        w.pending_view = None
        if fallback and w.state.model is None and source != fallback:
            open_instead(w, source, message, fallback)
            return
        w.start_note = None
        stays = what_stays(w.state)
        keep = sentence(stays[0].upper() + stays[1:])
        w.show_error(f"{sentence(f'Could not load model {source}: {message}')} {keep}")
    else:
        w.pending_view = None
        w.statusBar().showMessage(f"Stopped loading {source}; {what_stays(w.state)}.", 8000)


def open_instead(w, source: str, message: str, fallback: str) -> None:
    """The remembered model could not be opened (moved, deleted, its drive not mounted): the
    window's default opens, and the banner says why, while it loads and once it is shown."""
    why = sentence(f"Could not open the last model, {source}: {message}")
    w.start_note = (fallback, f"{why} Opened {fallback} instead; Models and File open another")
    w.show_error(f"{why} Opening {fallback} instead")
    w.load_model(fallback)


def what_stays(state) -> str:  # after a load that did not happen
    return f"still showing {state.model_name}" if state.model is not None else "no model is loaded"


def loaded(w, model) -> None:
    w.clear_error()  # (the runner set the state; the settings remember the model)
    (instead, note), w.start_note = w.start_note or ("", ""), None
    if note and w.state.model_source == instead:  # the default, opened for the remembered model
        w.show_error(note)
    w.statusBar().showMessage(f"Loaded {model.name}", 4000)
    if w.pending_view is not None:
        (view, path), w.pending_view = w.pending_view, None
        if view.get("model") in (model.name, w.state.model_source):
            w.apply_view(view, path)
        else:  # another model was opened while the view waited for its own
            w.statusBar().showMessage(f"Loaded {model.name}; the view of {view.get('model')} "
                                      "was not opened", 8000)
