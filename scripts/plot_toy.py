"""Plot the toy model's training curves (resources/toy-stdlib-gpt2/checkpoints.json) to a PNG:
the ICL score and the best induction-head score per checkpoint, and the dense trace they were
picked from. Rendered offscreen with pyqtgraph (the app's own plotting library).

    .venv/bin/python scripts/plot_toy.py [--out docs/toy_training.png]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "toy_training.png"  # the picture the guide shows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, default=ROOT / "resources" / "toy-stdlib-gpt2" / "checkpoints.json")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841
    meta = json.loads(args.json.read_text(encoding="utf-8"))
    ck, trace = meta["checkpoints"], meta["trace"]
    span = meta.get("dense_span_steps")

    win = pg.GraphicsLayoutWidget()
    win.setBackground("w")
    win.resize(1100, 700)
    title = ("attnviz-toy-stdlib: 2-layer attention-only GPT-2 on Python stdlib docstrings "
             "with repeated random segments")
    win.addLabel(title, row=0, col=0, color="k", size="11pt")

    def panel(row, key, label, color, ylim=None, legend=(-10, 10)):
        p = win.addPlot(row=row, col=0)
        p.showGrid(x=True, y=True, alpha=0.2)
        p.setLabel("left", label, color=color)
        p.getAxis("left").enableAutoSIPrefix(False)
        p.setLabel("bottom", "training step")
        p.addLegend(offset=legend)
        p.plot([t["step"] for t in trace], [t[key if key in trace[0] else "induction_torch"]
                                            for t in trace],
               pen=pg.mkPen(color, width=1, style=pg.QtCore.Qt.PenStyle.DashLine),
               name=f"every {trace[1]['step'] - trace[0]['step']} steps")
        p.plot([c["step"] for c in ck], [c[key] for c in ck], pen=None, symbol="o", symbolSize=7,
               symbolBrush=color, symbolPen=None, name=f"the {len(ck)} checkpoints")
        if span:
            region = pg.LinearRegionItem(span, movable=False, brush=pg.mkBrush(120, 120, 120, 40),
                                         pen=pg.mkPen(None))
            p.addItem(region)
        if ylim:
            p.setYRange(*ylim)
        return p

    p1 = panel(1, "induction_score", "best induction score", "#1b9e77", (0, 1), legend=(-10, -10))
    p2 = panel(2, "icl_score", "ICL score (nats)", "#d95f02", legend=(10, -10))
    p2.plot([c["step"] for c in ck], [c["icl_score_text"] for c in ck], pen=pg.mkPen("#777", width=1),
            symbol="t", symbolSize=6, symbolBrush="#777", symbolPen=None,
            name="ICL score on docstring text alone")
    p2.setXLink(p1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    win.show()
    app.processEvents()
    exporter = pg.exporters.ImageExporter(win.scene())
    exporter.parameters()["width"] = 1100
    exporter.export(str(args.out))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
