"""Draw docs/patching.png: the head_out patching map of the indirect-object pair on SmolLM2
(layers x heads, the diverging colours of the What heads do maps, 0 white), rendered offscreen.

    .venv/bin/python scripts/plot_patching.py [--out docs/patching.png]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "patching.png"  # the picture the guide shows
sys.path.insert(0, str(ROOT))

CLEAN = "When Mary and John went to the store, John gave a drink to"
CORRUPT = "When Mary and John went to the store, Mary gave a drink to"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QColor
    from PySide6.QtWidgets import QApplication

    from attnviz.engine import WINDOW_MODEL, load_model
    from attnviz.engine.analysing import patching as PT
    from attnviz.engine.computing.model import token_text
    from attnviz.figures import headmap
    from attnviz.figures.render import render_with

    app = QApplication.instance() or QApplication(sys.argv[:1])  # noqa: F841 (fonts need it)
    model = load_model(WINDOW_MODEL)
    cfg = model.config
    r = PT.patch(model, model.encode(CLEAN)[0], model.encode(CORRUPT)[0], "head_out")
    m = r.metric
    hm = headmap.HeadMap(
        title=f"head_out patching: logit({token_text(model, m.target)!r}) - logit("
              f"{token_text(model, m.alt)!r})",
        values=r.effect, unit="effect",
        kv_group=np.arange(cfg.n_head) // (cfg.n_head // cfg.n_kv_head))
    image, _ = render_with(lambda v, w: headmap.layout(v, w, 820), lambda p, v, lay: headmap.paint(
        p, v, lay, QColor("white")), hm, 400)
    if not image.save(str(args.out)):
        raise SystemExit(f"could not write {args.out}")
    print(f"wrote {args.out}: largest effect {np.abs(r.effect).max():.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
