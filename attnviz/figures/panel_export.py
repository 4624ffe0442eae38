"""A panel's figure as a file, through the one transactional writer: PNG or SVG with its JSON
sidecar, or its numbers. For figure modules that offer png_bytes, svg_bytes, sidecar and
number_bytes (figures/why.py, figures/circuits.py).

    export_figure(module, view, path, width, model_path=None) -> list[Path]
"""

from __future__ import annotations

import os
from pathlib import Path

from attnviz.figures.data import IMAGE_FORMATS, ExportError, format_of, write_atomic
from attnviz.figures.write import write_image


def export_figure(module, view, path: str | os.PathLike, width: int,
                  model_path: str | None = None) -> list[Path]:
    """Write `view` (module's) to `path`, its extension the format; ExportError says why not.
    `model_path`: where the model was opened by path (registry.opened_path), for the sidecar."""
    if view is None:
        raise ExportError("nothing to export yet")
    path = Path(path)
    fmt = format_of(path)
    if fmt in IMAGE_FORMATS:
        data, lay = (module.png_bytes if fmt == "png" else module.svg_bytes)(view, int(width))
        return write_image(path, data, module.sidecar(view, path, lay), lay, model_path=model_path)
    write_atomic([(path, module.number_bytes(view, fmt))])
    return [path]
