"""Make docs/screenshot.png from the real window (offscreen grab; works under Xvfb too).

    .venv/bin/python scripts/screenshot.py [--out docs/screenshot.png] [--view layer|all]
                                           [--scene induction|agreement]

induction (default): opens SmolLM2 on the made-up-names sample, scores every head on it, focuses
the strongest induction head and shows its layer, with the query on the last token of the repeated
name. agreement: opens MiniLM on the agreement sentence, picks the query token "are", focuses the
head that sends "are" most strongly to "keys" (subject-verb agreement), and shows that head's layer.
--panel compare opens Compare with this model quantized to --compare-type (default Q4_0) and shows
its panel on A − B, the focused head's layer. --panel prediction|dla shows the What heads do panel (the next token at the query with the logit
lens, or DLA); --ablate N switches off the N strongest induction heads first, so the grid, the
prediction, the lens and DLA show the changed run beside the clean prediction.
No head number is written here: each comes from the model's own patterns."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshot.png"))
    ap.add_argument("--view", choices=("layer", "all"), default="layer")
    ap.add_argument("--size", default="1400x860", help="window size WIDTHxHEIGHT")
    ap.add_argument("--scene", choices=("induction", "agreement"), default="induction")
    ap.add_argument("--panel", choices=("focus", "anatomy", "prediction", "dla", "compare"), default="focus",
                    help="side panel shown: the focus head (default), the Anatomy of its layer, or "
                         "What heads do (prediction and lens, or DLA)")
    ap.add_argument("--ablate", type=int, default=0,
                    help="switch off the N strongest induction heads (induction scene)")
    ap.add_argument("--dock-width", type=int, default=0, help="side panel width in pixels")
    ap.add_argument("--compare-type", default="Q4_0", help="--panel compare: B is A quantized to this")
    args = ap.parse_args()

    from PySide6.QtCore import QSettings

    from attnviz.ui.app import create_window, make_app
    from attnviz.engine.analysing import heads
    from attnviz.engine.reading.registry import DEFAULT_TEXT
    from attnviz.engine.analysing.samples import SAMPLES
    import numpy as np

    app = make_app()
    settings = QSettings(str(Path(tempfile.mkdtemp(prefix="attnviz-shot-")) / "s.ini"),
                         QSettings.Format.IniFormat)
    if args.scene == "induction":
        model, text = "SmolLM2-135M-Instruct", {s.title: s.text for s in SAMPLES}["Made-up names, repeated (induction)"]
    else:
        model, text = "all-MiniLM-L6-v2", DEFAULT_TEXT
    w = create_window(model=model, text=text, settings=settings)
    width, height = (int(v) for v in args.size.split("x"))
    w.resize(width, height)
    w.show()

    def settle(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.01)

    end = time.perf_counter() + 60
    while w.state.result is None and time.perf_counter() < end:
        settle(0.05)
    r = w.state.result
    if r is None:
        raise SystemExit("the model did not load: no screenshot")
    if args.scene == "induction":
        scores = heads.score_heads(r.attentions, r.input_ids).scores["induction"]  # [n_layer, n_head]
        layer, head = (int(i) for i in divmod(int(scores.argmax()), scores.shape[1]))
        q = len(r.labels) - 2  # last piece of the repeated place name, before the final "."
        k = int(r.attentions[layer, head, q].argmax())
        what = f"induction score {scores[layer, head]:.2f}"
        strongest = [divmod(int(i), scores.shape[1]) for i in np.argsort(-scores, axis=None)[:args.ablate]]
    else:
        q, k = r.labels.index("are"), r.labels.index("keys")
        weights = r.attentions[:, :, q, k]  # [n_layer, n_head]
        layer, head = (int(i) for i in divmod(int(weights.argmax()), weights.shape[1]))
        what = f"are → keys {weights[layer, head]:.2f}"
    st = w.state
    st.set_view_mode(args.view)
    st.set_layer(layer)
    st.set_focus(layer, head)
    st.set_query(q)
    w.focus_dock.raise_()
    settle(1.5)  # side panels finish their own background work
    dock = w.focus_dock
    if args.panel == "anatomy":
        dock = w.anatomy_dock
        dock.raise_()
        settle(1.0)  # the run that keeps the layer inputs
    if args.panel in ("prediction", "dla"):
        dock = w.predict_dock
        dock.show()
        dock.raise_()
        settle(0.3)
        dock.raise_()  # (a dock tab raised while the window still lays out its docks can lose)
        panel = w.predict_panel
        panel.tabs.setCurrentIndex(0 if args.panel == "prediction" else 1)
        if args.ablate and args.scene == "induction":
            from attnviz.engine.analysing.effects import Ablation

            st.effects.set_ablation(Ablation(heads=tuple(strongest)))
            what += "; switched off " + st.effects.ablation.describe()
        end = time.perf_counter() + 60
        while time.perf_counter() < end and not (
                st.effects.analysis is not None and st.effects.analysis.ablation == st.effects.ablation
                and st.effects.run is not None and st.effects.run.result is st.result):
            settle(0.05)
        settle(0.5)
    if args.panel == "compare":
        from attnviz.ui.machinery.compare_jobs import BSource
        from attnviz.ui.panels.compare_menu import open_compare

        open_compare(w, BSource("quantized", args.compare_type))
        dock, jobs = w.compare_dock, w.worker.compare_jobs
        end = time.perf_counter() + 300
        while time.perf_counter() < end and not (
                jobs.comparison is not None and jobs.comparison.doc is not None
                and jobs.comparison.doc["kld"] is not None and jobs.induction is not None):
            settle(0.05)
        if jobs.b is None:
            raise SystemExit(f"Compare did not open: {jobs.note}")
        what += f"; against {jobs.identity['name']}"
        dock.raise_()
        settle(0.5)
    if args.dock_width:
        from PySide6.QtCore import Qt

        w.resizeDocks([dock], [args.dock_width], Qt.Orientation.Horizontal)
        settle(0.3)
    st.show_status(w.grid.readout_at(layer, head, q, k))
    settle(0.2)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not w.grab().save(str(out)):
        raise SystemExit(f"could not write {out}")
    print(f"wrote {out} (L{layer} H{head}: {what}; query {r.labels[q]!r} → {r.labels[k]!r})")
    w.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
