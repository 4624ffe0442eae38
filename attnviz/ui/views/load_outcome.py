"""What the window says when a load ends (AppState.report_load): loaded (and a view that waited for
that model is opened), failed (the banner, and what stays on screen) or cancelled; and File > Open
view, which may load the view's model first."""

from __future__ import annotations

from pathlib import Path

from attnviz.engine.errors import AttnvizError
from attnviz.engine.reading import registry
from attnviz.engine.reading.memory_budget import chosen_by_command_line
from attnviz.ui.machinery import settings as remembered
from attnviz.ui.machinery.runner import describe_error, failure
from attnviz.ui.views.notices import sentence, show_status

MOVED_FROM = "moved_from"  # (a view's key, set by by_name_once_moved: the model_path it no longer has)


def report_load(w, source: str, outcome: str, message: str) -> None:
    """The outcome of a load of `source` in window `w`: loaded, failed or cancelled."""
    fallback, w.start_fallback = w.start_fallback, None  # (for the first outcome only)
    if outcome == "loaded":
        loaded(w, w.state.model)
    elif outcome in ("failed", "budget"):
        if outcome == "budget" and w.state.model is None and not chosen_by_command_line():
            load_with_auto(w, source, message, fallback)  # (a view waiting for the model still waits)
            return
        w.pending_view = None
        if fallback and w.state.model is None and source != fallback:
            open_instead(w, source, message, fallback)
            return
        w.start_note = None
        stays = what_stays(w.state)
        keep = sentence(stays[0].upper() + stays[1:])
        if outcome == "budget":
            keep += " Models > Memory budget sets another budget."
        w.show_error(f"{failure(f'Could not load model {source}', message)} {keep}")
    else:
        w.pending_view = None
        stopped = f"Stopped loading {source}; {what_stays(w.state)}."
        show_status(w.statusBar(), stopped, 8000)


def open_instead(w, source: str, message: str, fallback: str) -> None:
    """The remembered model could not be opened (moved, deleted, its drive not mounted): the
    window's default opens, and the banner says why, while it loads and once it is shown."""
    why = failure(f"Could not open the last model, {source}", message)
    w.start_note = (fallback, f"{why} Opened {fallback} instead; Models and File open another")
    w.show_error(f"{why} Opening {fallback} instead")
    w.load_model(fallback)


def load_with_auto(w, source: str, message: str, fallback: str | None) -> None:
    """The remembered memory budget is below one layer of the model opened, and no model is on
    screen (at start-up): the budget goes back to auto, remembered so, and the model loads again;
    the banner says so while it loads, and once it is shown (loaded)."""
    from attnviz.engine.reading.byte_sizes import format_bytes
    from attnviz.engine.reading.memory_budget import chosen_budget, set_memory_budget

    was = chosen_budget()
    set_memory_budget(None)
    remembered.remember_memory_budget(w.settings, "auto")
    size = f" ({format_bytes(was, 'down')})" if was is not None else ""  # (as the refusal words it)
    w.budget_note = (f"The remembered memory budget{size} is less than one layer of {source} "
                     f"expanded to float32; {remembered.BUDGET_RESET}")
    w.start_fallback = fallback  # (should the load fail again for another reason)
    w.show_error(f"{failure(f'Could not load model {source}', message)} Loading it with the "
                 "memory budget auto instead")
    w.load_model(source)


def what_stays(state) -> str:  # after a load that did not happen
    return f"still showing {state.model_name}" if state.model is not None else "no model is loaded"


def loaded(w, model) -> None:
    w.clear_error()  # (the runner set the state; the settings remember the model)
    (instead, note), w.start_note = w.start_note or ("", ""), None
    # the default, opened for the remembered model; a remembered memory budget put back to auto
    notes = [note] if note and w.state.model_source == instead else []
    budget, w.budget_note = w.budget_note, ""
    notes += [budget] if budget else []
    w.statusBar().showMessage(f"Loaded {model.name}", 4000)
    if w.pending_view is not None:  # (before the notes: a view applied clears the banner)
        (view, path), w.pending_view = w.pending_view, None
        if shows_model_of(view, w.state):
            apply_moved(w, view, path)
        else:  # another model was opened while the view waited for its own
            w.statusBar().showMessage(f"Loaded {model.name}; the view of {view.get('model')} "
                                      "was not opened", 8000)
    if notes:  # (after a view that could not be opened, its line)
        w.show_error(" ".join([*(sentence(n) for n in notes), *filter(None, [w.notices.banner.text()])]))


def shows_model_of(view: dict, state) -> bool:
    """Whether `state`'s model is the one a view (a sidecar) was exported from: the file or folder
    it names (model_path) where that model was opened by path, else the model of its name. Paths
    are compared resolved: `/x/../x/m`, a symlink to m and m itself are one model. A view whose
    path is gone (by_name_once_moved) is of the model of its name: one opened by path is another
    model of that name (a fine-tuned copy), not a match."""
    if view.get("model_path"):
        return state.model_path is not None and \
            Path(state.model_path).resolve() == Path(view["model_path"]).resolve()
    if view.get(MOVED_FROM) and state.model_path is not None:
        return False
    return view.get("model") in (state.model_name, state.model_source)


def open_view(w, path: str) -> None:
    """File > Open view of `path` (a sidecar, or the picture it is beside) in window `w`: shown now
    where its model is on screen, else once that model is loaded (`loaded`)."""
    from attnviz.figures.data import open_sidecar

    try:
        view = by_name_once_moved(open_sidecar(path))
    except (AttnvizError, OSError, ValueError, KeyError) as exc:
        # (open_sidecar's refusals and a file's OSError name the file: the lead does not again)
        named = isinstance(exc, AttnvizError) or bool(getattr(exc, "filename", None))
        why = describe_error(exc) if isinstance(exc, OSError) else str(exc)
        w.show_error(failure("Could not open the view" if named else f"Could not open view {path}", why))
        return
    if not view.get("model") or shows_model_of(view, w.state):
        apply_moved(w, view, path)
        return
    w.pending_view = (view, path)  # applied once that model is loaded
    source = view.get("model_path") or view["model"]  # (a model opened by path: that path)
    if w.state.loading != source:
        w.load_model(source)


def by_name_once_moved(view: dict) -> dict:
    """A view whose model_path is gone (the model moved, or the sidecar came from another machine)
    reopens its model by name where that is a name the registry knows (not a path from the current
    folder); else it keeps the path, and the failed load names the path it tried."""
    where, name = view.get("model_path"), view.get("model")
    if not where or Path(where).exists() or not name or Path(name).expanduser().exists():
        return view
    try:
        registry.resolve(name)
    except (AttnvizError, OSError):
        return view
    return {**{k: v for k, v in view.items() if k != "model_path"}, MOVED_FROM: where}


def apply_moved(w, view: dict, path: str) -> None:
    """Apply `view` in `w`; one reopened by its name (its model_path gone) says so in the banner,
    since a model of the same name may be another model (the base of a fine-tuned copy); so does
    one saved without a model_path (an older sidecar) shown on a model opened by path."""
    shown = w.apply_view(view, path)
    if view.get(MOVED_FROM):
        said = w.notices.banner.text() if w.notices.banner.isVisible() else ""
        moved = (f"{view[MOVED_FROM]} is not on this computer; opened {view['model']} by its "
                 "name instead")
        w.show_error(" ".join([sentence(moved), *filter(None, [said])]))
    elif shown and by_name_only(view, w.state):
        w.show_error(f"The view was saved without its model's path and was matched by the name "
                     f"{view['model']}: the model shown is {w.state.model_path}, which may be "
                     "another file than the one it was saved from")


def by_name_only(view: dict, state) -> bool:
    """Whether `view` (one without model_path) was matched to a model opened by path by its name
    alone, not by the source it was opened from."""
    return (not view.get("model_path") and bool(view.get("model")) and state.model_path is not None
            and view["model"] != state.model_source)
