"""What an export contains, without Qt: the selected patterns, their colour levels, the numbers as
.npy/.csv/.json bytes, the JSON sidecar of an image, and the one transactional writer
(`write_atomic`) that the command line and the window both use.

`ExportView` (figures/export_view.py) is the one description of an export; the figure (placed by
figures/heatmap_layout.py, painted by figures/heatmaps.py) and the number writers here read only
it."""

from __future__ import annotations

import csv
import io
import logging
import os
import secrets
from pathlib import Path

import numpy as np

import attnviz
from attnviz.engine.errors import AttnvizError, ModelLoadError
from attnviz.engine.computing.patterns import DEFAULT_SCALE, SCALE_MODES, SCOPES, check_index
from attnviz.engine.reading.file_write import temp_beside
from attnviz.engine.reading.validate import os_reason, read_json_object
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.figures.export_view import ExportView
from attnviz.figures.view import Shown
from attnviz.engine.reading.json_text import dumps as strict_json

# the colormaps the window offers (pyqtgraph's names; style.colormap_colors samples them)
COLORMAPS = ("viridis", "magma", "inferno", "plasma", "cividis", "turbo", "CET-L1", "CET-L3")
DEFAULT_COLORMAP = COLORMAPS[0]
MIN_WIDTH, MAX_WIDTH = 300, 12000  # pixels an exported image may be wide (heatmaps and anatomy)
DEFAULT_WIDTH = 2400  # pixels of an exported image unless told

log = logging.getLogger(__name__)

IMAGE_FORMATS = ("png", "svg")
NUMBER_FORMATS = ("npy", "csv", "json")
FORMATS = IMAGE_FORMATS + NUMBER_FORMATS
SIDECAR_KIND = "attnviz-view"
SIDECAR_VERSION = 1


NOTHING_YET = "nothing to export yet: no attention has been computed"


class ExportError(AttnvizError):
    """An export that cannot be made or written; the message says why."""


def make_view(result, *, model: str, scope: str, layer: int, head: int | None = None,
              colormap: str = DEFAULT_COLORMAP, scale_mode: str = DEFAULT_SCALE,
              hide_first: bool = False, checkpoint: dict | None = None,
              value_weighted: bool = False, ablation=None, badges=None, layer_kinds=None) -> ExportView:
    """Describe an export of `result` (an engine RunResult). Bad indices raise InputError with the
    model's counts; a view with nothing to show raises ExportError. `checkpoint` ({index, step,
    of}: engine.computing.checkpoints.checkpoint_record) is recorded for a model with training checkpoints.
    What is shown (value weighting, the hidden first key, the colour levels) is figures/view.Shown,
    the window's own: `value_weighted` needs a result run with values=True. `ablation` (an
    engine.analysing.effects.Ablation): what was switched off in the run `result` is of, recorded
    and named in the title and headers. `badges` ([n_layer][n_head]): the role badges the grid's
    titles show, the figure's panels' titles too; `layer_kinds` ([n_layer]: config.layer_kind)
    each layer's kind, which they say as the grid's do (figures/titles.tile_marks)."""
    if result is None:
        raise ExportError(NOTHING_YET)
    att = result.attentions  # [n_layer, n_head, T, T]
    n_layer, n_head, n_tok = att.shape[:3]
    if scope not in SCOPES:
        raise ExportError(f"scope {scope!r} is not one of {', '.join(SCOPES)}")
    if scale_mode not in SCALE_MODES:
        raise ExportError(f"scale mode {scale_mode!r} is not one of {', '.join(SCALE_MODES)}")
    check_index("layer", layer, n_layer)
    if scope == "head":
        check_index("head", head, n_head)
        layers, heads = [layer], [head]
    elif scope == "layer":
        layers, heads, head = [layer], list(range(n_head)), None
    else:
        layers, heads, head = list(range(n_layer)), list(range(n_head)), None
    if n_tok == 0:
        raise ExportError("nothing to export: the text has no tokens")
    if hide_first and n_tok < 2:
        raise ExportError(f"cannot hide the first token: the text has only {n_tok} token")
    if value_weighted and result.value_norms is None:
        raise ExportError("a value-weighted export needs the value norms: run the model with "
                          "values=True")
    shown = Shown(result, hide_first=hide_first, value_weighted=value_weighted)  # what the window shows
    patterns = np.ascontiguousarray(shown.region(layers, heads).values, dtype=np.float32)  # [n_layers, n_heads, T, n_k]
    labels = list(getattr(result, "labels", None) or result.tokens)
    return ExportView(
        model=model, text=result.text, tokens=list(result.tokens), labels=labels,
        ids=[int(i) for i in result.input_ids], scope=scope, layer=int(layer),
        head=None if head is None else int(head), layers=layers, heads=heads, patterns=patterns,
        key_pos=[int(k) for k in shown.key_pos], kv_group=[int(g) for g in result.kv_group],
        colormap=colormap, scale_mode=scale_mode, hide_first=bool(hide_first),
        levels=shown.levels(scale_mode, layers, heads),
        checkpoint=dict(checkpoint) if checkpoint else None, value_weighted=bool(value_weighted),
        ablation=ablation.to_json() if ablation is not None else None,
        changed=ablation.describe() if ablation is not None else "",
        badges=tuple(tuple(str(b) for b in row) for row in badges or ()),
        layer_kinds=tuple(str(k or "") for k in layer_kinds or ()),
        head_shares=tuple(tuple(float(v) for v in row) for row in result.head_share)
        if value_weighted and result.head_share is not None else ())


def format_of(path: str | os.PathLike) -> str:
    """The export format named by a file's extension."""
    ext = Path(path).suffix.lower().lstrip(".")
    if ext not in FORMATS:
        raise ExportError(f"cannot export to {Path(path).name!r}: the name must end in "
                          f"{', '.join('.' + f for f in FORMATS)}")
    return ext


def named_path(path: str | os.PathLike, fmt: str) -> tuple[Path, str]:
    """The file an export chosen as `fmt` writes, and its format: a name without an extension gets
    `fmt`'s; an extension of a format we write picks that format; any other is refused (ExportError),
    never written under a name that says another format."""
    p = Path(path)
    if not p.suffix and p.name and not p.is_dir():  # (a folder is left for the writer to refuse)
        return p.with_name(p.name.rstrip(".") + "." + fmt), fmt
    ext = p.suffix.lower().lstrip(".")
    if ext not in FORMATS and p.suffix:
        raise ExportError(f"cannot export to {p.name!r}: .{ext} is not a format attnviz writes; end the "
                          f"name in {', '.join('.' + f for f in FORMATS)} (the extension picks the format)")
    return p, (ext if p.suffix else fmt)


# --- numbers -----------------------------------------------------------------------------------

def fmt_all(arr: np.ndarray, undefined: str = "nan") -> list[str]:
    """Each float32 as text that reads back as the same float32 (9 significant digits); a NaN (a
    row with no weight once the first key is hidden) as `undefined`."""
    flat = np.asarray(arr, dtype=np.float32).ravel().tolist()
    out = ("%.9g\n" * len(flat) % tuple(flat)).split("\n")[:-1] if flat else []
    return [undefined if t == "nan" else t for t in out] if undefined != "nan" else out


def _csv_cell(text: str) -> str:
    out = io.StringIO()
    csv.writer(out, lineterminator="").writerow([text])
    return out.getvalue()


def npy_bytes(view: ExportView) -> bytes:
    buf = io.BytesIO()
    np.save(buf, view.selected(), allow_pickle=False)
    return buf.getvalue()


def csv_text(view: ExportView) -> str:
    """Head: a matrix, one row per query, with the query token first and the key tokens as header.
    Layer and all: long form, one row per weight (layer, head, query_pos, query_token, key_pos,
    key_token, weight)."""
    labels = [_csv_cell(t) for t in view.labels]
    n_q, n_k = view.patterns.shape[2:]
    weights = fmt_all(view.values(), "")  # row-major [n_layers, n_heads, n_q, n_k]; undefined: empty
    hidden = "first key hidden, rows renormalised" if view.hide_first else ""
    if view.scope == "head":
        notes = "; ".join(n for n in ("value-weighted" if view.value_weighted else "", hidden,
                                      view.changed) if n)
        corner = _csv_cell(f"query \\ key ({notes})" if notes else "query \\ key")
        lines = [",".join([corner] + [labels[k] for k in view.key_pos])]
        for q in range(n_q):
            lines.append(",".join([labels[q]] + weights[q * n_k:(q + 1) * n_k]))
        return "\n".join(lines) + "\n"
    weight = "value_weighted_weight" if view.value_weighted else "weight"
    notes = "; ".join(n for n in (hidden, view.changed) if n)
    lines = ["layer,head,query_pos,query_token,key_pos,key_token,"
             + (_csv_cell(f"{weight} ({notes})") if notes else weight)]
    keys = [f"{k},{labels[k]}," for k in view.key_pos]
    at = 0
    for layer in view.layers:
        for head in view.heads:
            for q in range(n_q):
                prefix = f"{layer},{head},{q},{labels[q]},"
                lines.extend([prefix + kp + w for kp, w in zip(keys, weights[at:at + n_k])])
                at += n_k
    return "\n".join(lines) + "\n"


def json_text(view: ExportView) -> str:
    """Tokens, ids and the weights nested like the .npy array, with what the numbers are."""
    doc = {
        "attnviz": attnviz.__version__, "model": view.model, "text": view.text,
        "tokens": view.tokens, "labels": view.labels, "ids": view.ids, "scope": view.scope,
        "layer": view.layer, "head": view.head, "layers": view.layers, "heads": view.heads,
        "hide_first": view.hide_first, "value_weighted": view.value_weighted,
        "ablation": view.ablation, "key_positions": view.key_pos,
        "shape": list(view.selected().shape),
        "axes": {"head": ["query", "key"], "layer": ["head", "query", "key"],
                 "all": ["layer", "head", "query", "key"]}[view.scope],
        "weights": None,
    }
    doc.update(checkpoint_entry(view.checkpoint))
    weights = _nested(view.selected(), fmt_all(view.selected(), "null"))  # undefined: null
    head, tail = strict_json(doc, ensure_ascii=False, indent=1).rsplit('"weights": null', 1)
    return head + '"weights": ' + weights + tail + "\n"


def _nested(arr: np.ndarray, flat: list[str]) -> str:
    """JSON nested lists of `arr`'s shape from its numbers already written as text."""
    if arr.ndim == 1:
        return "[" + ",".join(flat) + "]"
    step = int(np.prod(arr.shape[1:]))
    return "[" + ",".join(_nested(arr[0], flat[i * step:(i + 1) * step])
                          for i in range(arr.shape[0])) + "]"


def number_bytes(view: ExportView, fmt_name: str) -> bytes:
    if fmt_name == "npy":
        return npy_bytes(view)
    if fmt_name == "csv":
        return csv_text(view).encode("utf-8")
    if fmt_name == "json":
        return json_text(view).encode("utf-8")
    raise ExportError(f"unknown number format {fmt_name!r}; use one of {', '.join(NUMBER_FORMATS)}")


def write_numbers(view: ExportView, path: str | os.PathLike, fmt_name: str) -> list[Path]:
    """The numbers of `view` as one .npy/.csv/.json file, through write_atomic and without Qt (the
    command line writes them with no Qt loaded). Returns [path]."""
    path = Path(path)
    write_atomic([(path, number_bytes(view, fmt_name))])
    return [path]


# --- sidecar -----------------------------------------------------------------------------------

def sidecar_path(image_path: str | os.PathLike) -> Path:
    """The sidecar of `fig.png` is `fig.png.json`."""
    p = Path(image_path)
    return p.with_name(p.name + ".json")


def sidecar_dict(view: ExportView, image_path: str | os.PathLike, width: int, height: int,
                 panels: list[dict]) -> dict:
    if view.scale_mode == "shared":
        levels = [float(x) for x in view.levels[0, 0]]
    else:
        levels = view.levels.astype(np.float64).tolist()
    return {
        "kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
        "image": Path(image_path).name, "model": view.model, "text": view.text,
        "tokens": view.tokens, "labels": view.labels, "ids": view.ids, "scope": view.scope,
        "layer": view.layer, "head": view.head, "layers": view.layers, "heads": view.heads,
        "colormap": view.colormap, "scale_mode": view.scale_mode, "levels": levels,
        "hide_first": view.hide_first, "value_weighted": view.value_weighted,
        "view_mode": "all" if view.scope == "all" else "layer",
        "width": int(width), "height": int(height),
        "panels": panels,
        **checkpoint_entry(view.checkpoint),
        **({"ablation": view.ablation} if view.ablation else {}),  # (File -> Open view restores it)
    }


def with_model_path(meta: dict, model_path: str | None) -> dict:
    """A sidecar's dict with "model_path" after "model": where a model opened by path is
    (registry.opened_path), which File > Open view reopens it from. Unchanged for a model opened
    by name, which reopens by its name."""
    if not model_path:
        return meta
    keys = list(meta)
    at = keys.index("model") + 1 if "model" in keys else len(keys)
    return {**{k: meta[k] for k in keys[:at]}, "model_path": model_path,
            **{k: meta[k] for k in keys[at:]}}


_REQUIRED = {"model": str, "text": str, "tokens": list, "layer": int, "scope": str,
             "colormap": str, "scale_mode": str, "hide_first": bool}


def open_sidecar(path: str | os.PathLike) -> dict:
    """Read the sidecar of an exported image, given the image or the sidecar itself, and check it.
    Returns its dict (keys model, text, tokens, layer, head, scope, colormap, scale_mode, levels,
    hide_first, ..., and model_path for a model opened by path: absolute, a relative one taken
    from the sidecar's folder). Raises ExportError saying what is wrong."""
    p = Path(path)
    candidates = [p] if p.suffix.lower() == ".json" else [sidecar_path(p)]
    if p.suffix.lower() == ".json" and not p.exists():
        candidates.append(sidecar_path(p))
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise ExportError(f"no attnviz view file at {p if p.suffix.lower() == '.json' else candidates[-1]}"
                          + ("" if p.suffix.lower() == ".json" else f" (the sidecar of {p.name})"))
    try:  # the engine's one reader of JSON files: size cap, file kind, encoding, nesting
        doc = read_json_object(found)
    except ModelLoadError as exc:
        raise ExportError(str(exc)) from None
    if doc.get("kind") != SIDECAR_KIND:
        raise ExportError(f"{found} is not an attnviz view file (no \"kind\": \"{SIDECAR_KIND}\")")
    if not isinstance(doc.get("version"), int) or doc["version"] > SIDECAR_VERSION:
        raise ExportError(f"{found} has view-file version {doc.get('version')!r}; this attnviz "
                          f"({attnviz.__version__}) reads version {SIDECAR_VERSION}")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise ExportError(f"{found} is missing {', '.join(missing)}")
    for key, typ in _REQUIRED.items():
        val = doc[key]
        if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
            raise ExportError(f"{found}: {key} should be {typ.__name__}, got {val!r}")
    head = doc.get("head")
    if head is not None and (not isinstance(head, int) or isinstance(head, bool) or head < 0):
        raise ExportError(f"{found}: head should be a head index or null, got {head!r}")
    if doc["layer"] < 0:
        raise ExportError(f"{found}: layer should be 0 or more, got {doc['layer']}")
    if doc["scope"] not in SCOPES:
        raise ExportError(f"{found}: scope {doc['scope']!r} is not one of {', '.join(SCOPES)}")
    if doc["scope"] == "head" and head is None:
        raise ExportError(f"{found}: scope is head but no head is given")
    if doc["scale_mode"] not in SCALE_MODES:
        raise ExportError(f"{found}: scale_mode {doc['scale_mode']!r} is not one of "
                          f"{', '.join(SCALE_MODES)}")
    if not isinstance(doc.setdefault("value_weighted", False), bool):  # (older views have none)
        raise ExportError(f"{found}: value_weighted should be true or false, got {doc['value_weighted']!r}")
    if not isinstance(doc.get("model_path", ""), str):
        raise ExportError(f"{found}: model_path should be a path, got {doc['model_path']!r}")
    if doc.get("model_path"):  # (a relative one is from the sidecar's folder, not the current one)
        doc["model_path"] = str((found.parent / Path(doc["model_path"]).expanduser()).resolve())
    doc.setdefault("head", None)
    doc["sidecar"] = str(found)
    return doc


# --- atomic writes -----------------------------------------------------------------------------
# One transactional writer for every export (the command line and the window): a failed export
# leaves each folder exactly as it was, the same names with the same bytes and no temporary files.

def _check_target(path: Path) -> None:
    """Refuse, before anything is written, a target whose folder is missing or is a file, and a
    target that is itself a folder."""
    try:
        folder = path.parent
        nearest = next(p for p in (folder, *folder.parents) if os.path.lexists(p))
        if not nearest.is_dir():
            raise ExportError(f"cannot write {path}: {nearest} is not a folder")
        if nearest != folder:
            raise ExportError(f"cannot write {path}: folder {folder} does not exist")
        if path.is_dir():
            raise ExportError(f"cannot write {path}: it is a folder, not a file")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {os_reason(exc)}") from None


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may take only part of the data): every
    export's bytes go through it."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _stage(path: Path, data: bytes, temps: list[Path]) -> Path:
    """Write `data` to a new hidden temporary file next to `path`, flushed to disk; it is listed in
    `temps` as soon as it exists, so the caller removes it whatever happens next."""
    fd, tmp = temp_beside(path, ".tmp")
    temps.append(tmp)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp


def _keep_aside(path: Path, aside: dict[Path, tuple[Path, bool]]) -> None:
    """Keep the old file at `path` under a hidden temporary name until the export has landed,
    recorded in `aside` before it is made, so that an interruption at any point can be undone.
    A hard link leaves the old file in place meanwhile (linked=True); where the file system has no
    hard links the old file is renamed aside (linked=False) and `path` is empty until the move."""
    for _ in range(100):
        old = path.with_name(f".{path.name}.{secrets.token_hex(4)}.old")
        if os.path.lexists(old):
            continue
        aside[path] = (old, True)
        try:
            os.link(path, old, follow_symlinks=False)
            return
        except FileExistsError:  # taken since the check: not ours to remove
            del aside[path]
            continue
        except (OSError, NotImplementedError):  # no hard links here
            aside[path] = (old, False)
            os.rename(path, old)
            return
    raise ExportError(f"cannot write {path}: no free temporary name next to it")  # pragma: no cover


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries (the renames) to disk where the file system allows it."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _roll_back(staged: list[tuple[Path, Path]], temps: list[Path],
               aside: dict[Path, tuple[Path, bool]]) -> list[str]:
    """Undo a failed export: put every old file back under its name, remove new files that had no
    old one and every temporary file. Returns what could not be undone, in words."""
    problems = []
    placed = [path for tmp, path in staged if not os.path.lexists(tmp)]  # moved into place
    for path in reversed(placed):
        old, _ = aside.pop(path, (None, False))
        try:
            if old is None:
                os.unlink(path)  # there was no file of that name before
            else:
                os.replace(old, path)  # the old file comes back
        except OSError as exc:
            problems.append(f"{path} could not be restored ({os_reason(exc)})"
                            + (f"; the old file is kept as {old}" if old else ""))
    for path, (old, linked) in aside.items():  # kept aside but not replaced
        try:
            if linked:
                os.unlink(old)  # the old file never left its name
            else:
                os.replace(old, path)
        except FileNotFoundError:  # interrupted before it was made
            pass
        except OSError as exc:
            problems.append(f"{path} could not be restored ({os_reason(exc)}); "
                            f"the old file is kept as {old}")
    for tmp in temps:
        try:
            os.unlink(tmp)
        except FileNotFoundError:  # moved into place (and undone above)
            pass
        except OSError as exc:
            problems.append(f"the temporary file {tmp} could not be removed ({os_reason(exc)})")
    for problem in problems:
        log.error("after a failed export: %s", problem)
    return problems


def write_atomic(files: list[tuple[str | os.PathLike, bytes]]) -> None:
    """Write every (path, data) as one transaction: all files land or the folders stay exactly as
    they were. Each file is written to a temporary file next to its target and flushed to disk;
    only when all are complete are they moved into place (os.replace), with the files they replace
    kept aside under temporary names until every move has succeeded, and put back if one fails.
    Failures raise ExportError naming the path and the reason."""
    targets = [(Path(path), data) for path, data in files]
    assert len({p for p, _ in targets}) == len(targets), "the same path twice in one export"
    for path, _ in targets:
        _check_target(path)
    temps: list[Path] = []
    staged: list[tuple[Path, Path]] = []  # (temporary file, target)
    aside: dict[Path, tuple[Path, bool]] = {}  # target -> (old file's temporary name, linked)
    try:
        # write every file to a temporary one
        for path, data in targets:
            try:
                staged.append((_stage(path, data, temps), path))
            except OSError as exc:
                raise ExportError(f"cannot write {path}: {os_reason(exc)}") from exc
        # keep the old files
        for _, path in staged:
            if os.path.lexists(path):
                try:
                    _keep_aside(path, aside)
                except OSError as exc:
                    raise ExportError(f"cannot write {path}: {os_reason(exc)}") from exc
        # move the new files into place
        for tmp, path in staged:
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise ExportError(f"cannot write {path}: {os_reason(exc)}") from exc
    except BaseException as exc:
        problems = _roll_back(staged, temps, aside)
        if problems and isinstance(exc, ExportError):
            raise ExportError(f"{exc}; {'; '.join(problems)}") from None
        raise
    for folder in dict.fromkeys(path.parent for _, path in staged):
        _sync_folder(folder)
    for old, _ in aside.values():
        try:
            os.unlink(old)
        except OSError as exc:
            log.warning("exported, but the old file kept as %s could not be removed: %s",
                        old, os_reason(exc))
