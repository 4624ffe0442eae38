"""Writing a figure or its numbers to disk, headless or from the window: every image with its JSON
sidecar, through the one transactional writer (all files land, or the folder is left as it was).

    export_view(view, path, fmt=None, width=DEFAULT_WIDTH, model_path=None) -> list[Path]
    export_result(result, path, *, model, scope, layer, head=None, ...) -> list[Path]
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from attnviz.figures import anatomy as anatomy_figure
from attnviz.figures import effects as effects_figure
from attnviz.figures.anatomy import AnatomyView
from attnviz.figures.data import (
    DEFAULT_COLORMAP, DEFAULT_WIDTH, FORMATS, IMAGE_FORMATS, NUMBER_FORMATS, ExportError, format_of, make_view,
    sidecar_dict, sidecar_path, with_model_path, write_atomic, write_numbers,
)
from attnviz.figures.export_view import ExportView
from attnviz.figures.heatmaps import png_bytes, svg_bytes
from attnviz.engine.reading.json_text import dumps as strict_json

log = logging.getLogger(__name__)


def export_view(view: ExportView, path: str | os.PathLike, fmt: str | None = None,
                width: int = DEFAULT_WIDTH, model_path: str | None = None) -> list[Path]:
    """Write `view` to `path` (plus `<path>.json`, the sidecar, for images) through the one
    transactional writer: all files land, or the folder is left exactly as it was (an existing
    image and sidecar keep their bytes) and ExportError names the path and the reason.
    `model_path`: where the model was opened by path (registry.opened_path), for the sidecar.
    Returns the paths written."""
    path = Path(path)
    fmt = fmt or format_of(path)
    if isinstance(view, AnatomyView):
        return _export_anatomy(view, path, fmt, width, model_path)
    if isinstance(view, effects_figure.EffectsView):
        return _export_effects(view, path, fmt, width, model_path)
    if fmt in NUMBER_FORMATS:
        return write_numbers(view, path, fmt)
    if fmt not in IMAGE_FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    data, lay = (png_bytes if fmt == "png" else svg_bytes)(view, int(width))
    meta = sidecar_dict(view, path, lay.width, lay.height, [b.as_dict() for b in lay.panels])
    return write_image(path, data, meta, lay, model_path=model_path)


def _export_anatomy(view: AnatomyView, path: Path, fmt: str, width: int,
                    model_path: str | None) -> list[Path]:
    """The anatomy figure through the same writer and sidecar as the heatmaps (images only)."""
    if fmt not in IMAGE_FORMATS:
        raise ExportError(f"the anatomy view exports as .png or .svg, not .{fmt}")
    data, lay = (anatomy_figure.png_bytes if fmt == "png" else anatomy_figure.svg_bytes)(
        view, int(width))
    return write_image(path, data, anatomy_figure.sidecar(view, path, lay), lay, "anatomy ",
                       model_path)


def _export_effects(view, path: Path, fmt: str, width: int, model_path: str | None) -> list[Path]:
    """A What heads do view (prediction, lens, DLA): the figure with its sidecar, or its numbers."""
    if fmt in NUMBER_FORMATS:
        write_atomic([(path, effects_figure.number_bytes(view, fmt))])
        return [path]
    if fmt not in IMAGE_FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    data, lay = (effects_figure.png_bytes if fmt == "png" else effects_figure.svg_bytes)(view, int(width))
    return write_image(path, data, effects_figure.sidecar(view, path, lay), lay, f"{view.kind} ",
                       model_path)


def write_image(path: Path, data: bytes, meta: dict, lay, what: str = "",
                model_path: str | None = None) -> list[Path]:
    """An image and its sidecar (`meta` as JSON, with `model_path` where the model was opened by
    path) in one transaction; `lay` gives the size logged. Returns [image, sidecar]."""
    side = sidecar_path(path)
    meta = with_model_path(meta, model_path)
    write_atomic([(path, data),
                  (side, (strict_json(meta, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))])
    log.info("exported %s%s (%d x %d) and %s", what, path, lay.width, lay.height, side.name)
    return [path, side]


def export_result(result, path: str | os.PathLike, *, model: str, scope: str, layer: int,
                  head: int | None = None, width: int = DEFAULT_WIDTH, colormap: str = DEFAULT_COLORMAP,
                  scale_mode: str = "shared", hide_first: bool = False,
                  fmt: str | None = None, checkpoint: dict | None = None,
                  value_weighted: bool = False, ablation=None,
                  model_path: str | None = None, badges=None, layer_kinds=None) -> list[Path]:
    """make_view + export_view in one call (what the CLI and the dialog use)."""
    fmt = fmt or format_of(path)
    view = make_view(result, model=model, scope=scope, layer=layer, head=head,
                     colormap=colormap, scale_mode=scale_mode, hide_first=hide_first,
                     checkpoint=checkpoint, value_weighted=value_weighted, ablation=ablation,
                     badges=badges, layer_kinds=layer_kinds)
    return export_view(view, path, fmt=fmt, width=width, model_path=model_path)
