"""Plot what each GGUF type does to a float32 model's weights (all-MiniLM-L6-v2, every 2-D weight
matrix quantized as `attnviz quantize` does): the relative rounding error ||W_q - W|| / ||W|| over
all of them against the bits each weight takes. Rendered offscreen with pyqtgraph.

    .venv/bin/python scripts/plot_quantize.py [--out docs/quantize.png]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "quantize.png"  # the picture the guide shows
sys.path.insert(0, str(ROOT))

# bits a weight takes at each type: the block's bytes x 8 / its values
TYPES = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "BF16", "F16")


def errors(model) -> dict[str, tuple[float, float]]:
    """type -> (bits per weight, relative RMS error over every quantized 2-D weight)."""
    from gguf import GGML_QUANT_SIZES

    from attnviz.engine.reading.quantize import is_quantized, quant_type, round_trip
    from attnviz.engine.reading.weights import Checkpoint

    ckpt = Checkpoint(model.path)
    mats = [ckpt.get(n, ckpt.shape(n)) for n in ckpt.names()
            if is_quantized(n, ckpt.shape(n))]
    out = {}
    for name in TYPES:
        qt = quant_type(name)
        block, size = GGML_QUANT_SIZES[qt]
        err = sum(float(np.sum((round_trip(w, qt)[0] - w) ** 2)) for w in mats)
        total = sum(float(np.sum(np.asarray(w, np.float64) ** 2)) for w in mats)
        out[name] = (8 * size / block, (err / total) ** 0.5)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    from attnviz.engine import load_model

    app = QApplication.instance() or QApplication(sys.argv[:1])
    model = load_model("all-MiniLM-L6-v2")
    points = errors(model)
    win = pg.GraphicsLayoutWidget()
    win.setBackground("w")
    win.resize(900, 520)
    win.addLabel(f"{model.name}: every 2-D weight matrix quantized, relative rounding error "
                 "||W_q - W|| / ||W||", row=0, col=0, color="k", size="11pt")
    plot = win.addPlot(row=1, col=0)
    plot.setLogMode(x=False, y=True)
    plot.showGrid(x=True, y=True, alpha=0.3)
    plot.setLabel("bottom", "bits per weight", color="k")
    plot.setLabel("left", "relative RMS error", color="k")
    for axis in ("bottom", "left"):
        plot.getAxis(axis).setTextPen("k")
        plot.getAxis(axis).setPen("k")
        plot.getAxis(axis).enableAutoSIPrefix(False)
    plot.getAxis("left").setWidth(70)
    bits = np.array([b for b, _ in points.values()])
    err = np.array([e for _, e in points.values()])
    plot.plot(bits, err, pen=None, symbol="o", symbolSize=11,
              symbolBrush=(31, 119, 180), symbolPen="k")
    below = ("Q4_1", "Q5_1", "F16")  # labels under their point where neighbours are close
    for name, (b, e) in points.items():
        label = pg.TextItem(name, color="k", anchor=(0.5, -0.3) if name in below else (0.5, 1.3))
        label.setPos(b, np.log10(e))  # (items sit in the plot's log10 coordinates)
        plot.addItem(label)
    plot.setXRange(4, 18.5, padding=0)
    plot.setYRange(np.log10(err.min()) - 0.4, np.log10(err.max()) + 0.3, padding=0)
    win.show()  # (offscreen) laid out at its size before the export
    app.processEvents()
    exporter = pg.exporters.ImageExporter(win.scene())
    exporter.parameters()["width"] = 900
    exporter.export(str(args.out))
    for name, (b, e) in points.items():
        print(f"{name:5s} {b:5.1f} bits  relative RMS error {e:.3g}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
