"""The Compare panel's exports (compare_panel.ComparePanel.export): the panel as a PNG or SVG
picture with its sidecar, an attnviz view file that File > Open view restores, or the numbers
alone (the sidecar's content as .json, the JSD map as .csv), written all or nothing."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QPoint
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QFileDialog

from attnviz.figures.compare_csv import csv_text
from attnviz.engine.computing.checkpoints import checkpoint_entry
from attnviz.ui.machinery.runner import failure
from attnviz.engine.reading.json_text import dumps as strict_json


def export_dialog(panel) -> None:
    """Asks where (and so in which format) to export `panel`; a failure is one line in the panel."""
    from attnviz.ui.export import export_folder, remember_folder

    path, _ = QFileDialog.getSaveFileName(
        panel, "Export the comparison", str(export_folder() / "compare.png"),
        "PNG image (*.png);;SVG image (*.svg);;Numbers (*.json);;JSD map (*.csv)")
    try:
        if path:
            export(panel, path)
            remember_folder(path)
    except Exception as exc:  # noqa: BLE001  (one line in the panel; the app goes on)
        panel.jobs.note = failure(f"Could not export {path}", str(exc))
        panel.refresh()


def export(panel, path) -> list[Path]:
    """`panel` as a .png or .svg picture with its sidecar `<path>.json` (an attnviz view file:
    the text, A's and B's identity and every number), or the numbers alone (.json: the
    sidecar's content; .csv: the JSD map), written all or nothing. -> the files written."""
    from attnviz.figures.data import sidecar_path, write_atomic
    from attnviz.figures.render import encode_png, render_svg

    path = Path(path)
    fmt = path.suffix.lower()
    meta = (strict_json(sidecar(panel, path), ensure_ascii=False) + "\n").encode("utf-8")
    if fmt == ".json":
        write_atomic([(path, meta)])
        return [path]
    if fmt == ".csv":
        d = panel.doc()
        write_atomic([(path, csv_text(d["heads_jsd"], d["heads_jsd_max"]).encode("utf-8"))])
        return [path]
    if fmt == ".svg":
        data = render_svg(panel.width(), panel.height(), "attnviz compare", panel.title.text(),
                          lambda p: panel.render(p, QPoint(0, 0)))
    elif fmt == ".png":
        data = encode_png(panel.grab().toImage().convertToFormat(QImage.Format.Format_RGB32))
    else:
        raise ValueError(f"export as .png, .svg, .json or .csv, not {fmt or 'no suffix'}")
    side = sidecar_path(path)
    write_atomic([(path, data), (side, meta)])
    return [path, side]


def sidecar(panel, path) -> dict:
    """An attnviz view file (File > Open view restores the text, the layer, the focused head
    and Compare with the same B) with the comparison's identities and numbers under "compare";
    with Value-weighted on, under "tiles_note" the line the panel shows under its tiles (never
    value-weighted)."""
    import attnviz
    from attnviz.engine.analysing.compare import identity
    from attnviz.engine.computing.checkpoints import checkpoint_record
    from attnviz.figures.data import SIDECAR_KIND, SIDECAR_VERSION, with_model_path
    from attnviz.ui.machinery.compare_jobs import side_name
    from attnviz.ui.views.grid_compare import TILES_NOT_WEIGHTED

    c, st, j = panel.jobs.comparison, panel.state, panel.jobs
    focus = st.focus
    ck = checkpoint_record(st.model)  # A's training step: File > Open view shows it again (apply_view)
    doc = {"kind": SIDECAR_KIND, "version": SIDECAR_VERSION, "attnviz": attnviz.__version__,
           **checkpoint_entry(ck),
           "view": "compare", "image": Path(path).name, "model": st.model_name,
           "text": c.result.text, "tokens": list(c.result.tokens), "layer": st.layer,
           "head": focus[1] if focus is not None and focus[0] == st.layer else None,
           "scope": "layer", "colormap": st.colormap, "scale_mode": st.scale_mode,
           "hide_first": st.hide_first, "value_weighted": st.value_weighted,
           "compare": {"b_source": j.source.to_json(), "mode": j.mode,
                       "input_ids": c.result.input_ids.tolist(), "a": identity(st.model, side_name(st.model), checkpoint=ck),
                       "b": j.identity, **c.doc, "induction": j.induction,
                       **({"tiles_note": TILES_NOT_WEIGHTED} if st.value_weighted else {})}}
    return with_model_path(doc, st.model_path)
