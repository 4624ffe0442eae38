"""Make docs/screenshot.png from the real window (offscreen grab; works under Xvfb too).

    .venv/bin/python scripts/screenshot.py [--out docs/screenshot.png] [--view layer|all]
                                           [--scene induction|agreement]

induction (default): opens SmolLM2 on the made-up-names sample, scores every head on it, focuses
the strongest induction head and shows its layer, with the query on the last token of the repeated
name. agreement: opens MiniLM on the agreement sentence, picks the query token "are", focuses the
head that sends "are" most strongly to "keys" (subject-verb agreement), and shows that head's layer.
--panel prediction|dla shows the What heads do panel (the next token at the query with the logit
lens, or DLA); --panel why opens Why here? on the focused cell (the query on the repeated name, the
key it attends to most) with its strongest head component hovered, so the grid outlines that head;
--panel circuits shows the Circuits tab (copying map, the focused head's partners, and what it
writes for the query token); --ablate N switches off the N strongest induction heads first, so the grid, the
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
    ap.add_argument("--panel", choices=("focus", "anatomy", "prediction", "dla", "why", "circuits"),
                    default="focus",
                    help="side panel shown: the focus head (default), the Anatomy of its layer, or "
                         "What heads do (prediction and lens, or DLA)")
    ap.add_argument("--ablate", type=int, default=0,
                    help="switch off the N strongest induction heads (induction scene)")
    ap.add_argument("--dock-width", type=int, default=0, help="side panel width in pixels")
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
    if args.panel == "why":
        from attnviz.figures.why import heads_of

        dock = w.focus_dock
        w.why_dock.show()
        w.why_jobs.set_cell(layer, head, q, k)
        end = time.perf_counter() + 60
        while time.perf_counter() < end and (w.why_jobs.attribution is None or w.why_jobs.busy):
            settle(0.05)
        if w.why_jobs.attribution is None:
            raise SystemExit(f"no Why here? list: {w.why_jobs.note}")
        from PySide6.QtCore import Qt

        w.resizeDocks([w.focus_dock, w.why_dock], [height // 3, height], Qt.Orientation.Vertical)
        settle(0.3)
        canvas = w.why_panel.canvas  # hover the key side's largest head: the grid outlines it
        rests = [i for i, b in enumerate(canvas.lay.rows) if not b.row.components]
        box = next((b for b in canvas.lay.rows[rests[1] + 1:] if heads_of(b.row.components)), None)
        if box is not None:
            canvas.hover_row(box.rect.center().y())
            what += f"; hovered {box.row.label}"
        settle(0.3)
    if args.panel == "circuits":
        dock = w.circuits_dock
        dock.show()
        dock.raise_()
        end = time.perf_counter() + 120
        while time.perf_counter() < end and (w.circuits_jobs.circuits is None
                                             or w.circuits_jobs.ov is None):
            settle(0.1)
        settle(0.3)
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
