"""What the window says when a load ends (AppState.report_load): loaded (and a view that waited for
that model is opened), failed (the banner, and what stays on screen) or cancelled."""

from __future__ import annotations

from attnviz.ui.views.notices import sentence


def report_load(w, source: str, outcome: str, message: str) -> None:
    """The outcome of a load of `source` in window `w`: loaded, failed or cancelled."""
    if outcome == "loaded":
        loaded(w, w.state.model)
    elif outcome == "failed":
        w.pending_view = None
        stays = what_stays(w.state)
        keep = sentence(stays[0].upper() + stays[1:])
        w.show_error(f"{sentence(f'Could not load model {source}: {message}')} {keep}")
    else:
        w.pending_view = None
        w.statusBar().showMessage(f"Stopped loading {source}; {what_stays(w.state)}.", 8000)


def what_stays(state) -> str:  # after a load that did not happen
    return f"still showing {state.model_name}" if state.model is not None else "no model is loaded"


def loaded(w, model) -> None:
    w.clear_error()  # (the runner set the state; the settings remember the model)
    w.statusBar().showMessage(f"Loaded {model.name}", 4000)
    if w.pending_view is not None:
        (view, path), w.pending_view = w.pending_view, None
        if view.get("model") in (model.name, w.state.model_source):
            w.apply_view(view, path)
        else:  # another model was opened while the view waited for its own
            w.statusBar().showMessage(f"Loaded {model.name}; the view of {view.get('model')} "
                                      "was not opened", 8000)
