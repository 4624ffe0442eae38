"""Make docs/screenshot.png from the real window (offscreen grab; works under Xvfb too).

    .venv/bin/python scripts/screenshot.py --all      # every screenshot of the README and docs/
    .venv/bin/python scripts/screenshot.py [--out docs/screenshot.png] [--view layer|all]
                                           [--scene induction|agreement|long|generate|corpus]

induction (default): opens SmolLM2 on the made-up-names sample, scores every head on it, focuses
the strongest induction head and shows its layer, with the query on the last token of the repeated
name. agreement: opens MiniLM on the agreement sentence, picks the query token "are", focuses the
head that sends "are" most strongly to "keys" (subject-verb agreement), and shows that head's layer.
--panel compare opens Compare with this model quantized to --compare-type (default Q4_0) and shows
its panel on A − B, the focused head's layer. --panel prediction|dla shows the What heads do panel (the next token at the query with the logit
lens, or DLA); --panel why opens Why here? on the focused cell (the query on the repeated name, the
key it attends to most) with its strongest head component hovered, so the grid outlines that head;
--panel circuits shows the Circuits tab (copying map, the focused head's partners, and what it
writes from its top key at the query); --panel patching opens SmolLM2 on the indirect-object sentence, lets
Corrupt propose the corrupted text, patches every head's output (head_out) and clicks the head with
the largest effect, so its clean and corrupted patterns show and the grid focuses it; --ablate N switches off the N strongest induction heads first, so the grid, the
prediction, the lens and DLA show the changed run beside the clean prediction.
long: SmolLM2 on the long paragraph said ten times (past the dense limit), shown in the long
view. generate (and --panel generate, which implies it): SmolLM2 generates eight greedy tokens
after a short prompt, the Generate panel shown. corpus: MiniLM on the agreement sentence with a scan of 60 standard-library docstring
paragraphs (made in a temporary folder, in this process) open in the Corpus panel, its strongest
previous-token head picked. toy: the toy model trained by attnviz on the repeated random
sequence, at its last checkpoint, its strongest induction head focused. --all makes each picture SHOTS lists, one fresh process each.
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

# every picture of the README and docs/: its file under docs/ and the arguments that make it
SHOTS = {
    "screenshot.png": [],
    "agreement.png": ["--scene", "agreement"],
    "all-layers.png": ["--view", "all"],
    "anatomy.png": ["--panel", "anatomy", "--size", "1600x900", "--dock-width", "900"],
    "whatheads.png": ["--panel", "dla", "--ablate", "1", "--dock-width", "620"],
    "prediction.png": ["--panel", "prediction", "--dock-width", "620"],
    "calculator.png": ["--panel", "calc", "--dock-width", "620"],
    "roles.png": ["--panel", "roles", "--dock-width", "620"],
    "find.png": ["--scene", "agreement", "--panel", "find", "--dock-width", "620"],
    "long.png": ["--scene", "long"],
    "generate.png": ["--scene", "generate", "--panel", "generate", "--dock-width", "560"],
    "corpus.png": ["--scene", "corpus", "--panel", "corpus", "--dock-width", "700"],
    "toy.png": ["--scene", "toy"],
    "why-here.png": ["--panel", "why", "--view", "all", "--size", "1400x1000"],
    "circuits.png": ["--panel", "circuits", "--size", "1400x1000", "--dock-width", "560"],
    "compare.png": ["--panel", "compare", "--size", "1600x1000", "--dock-width", "700"],
    "patching-tab.png": ["--panel", "patching", "--size", "1600x1000", "--dock-width", "760"],
}


def make_all(python: str = sys.executable) -> int:
    """Every picture in SHOTS, each by a fresh process of this script."""
    import subprocess

    failed = []
    for name, extra in SHOTS.items():
        cmd = [python, str(Path(__file__).resolve()), "--out", str(ROOT / "docs" / name), *extra]
        if subprocess.run(cmd).returncode != 0:
            failed.append(name)
    if failed:
        print("failed: " + ", ".join(failed), file=sys.stderr)
    return 1 if failed else 0


def _corpus_scan(folder: Path) -> Path:
    """A small scan (MiniLM, 60 docstring paragraphs, in this process) for the Corpus panel."""
    import subprocess

    corpus = folder / "stdlib.txt"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "stdlib_corpus.py"), "--out", str(corpus),
                    "--max", "60"], check=True, capture_output=True)
    from attnviz.cli import main as cli

    out = folder / "scan"
    if cli(["scan", "--model", "all-MiniLM-L6-v2", "--corpus", str(corpus), "--out", str(out),
            "--workers", "0", "--max-tokens", "128"]) != 0:
        raise SystemExit("the scan failed: no screenshot")
    return out


def _heads_to_switch_off(text: str) -> int:  # --ablate's N: a count of heads, at least 1
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"N heads to switch off is at least 1, not {n}")
    return n


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line's options, a refused combination refused (exit 2, saying why), and the scene
    a panel implies given."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="make every picture of SHOTS under docs/")
    ap.add_argument("--out", default=str(ROOT / "docs" / "screenshot.png"))
    ap.add_argument("--view", choices=("layer", "all"), default="layer")
    ap.add_argument("--size", default="1400x860", help="window size WIDTHxHEIGHT")
    ap.add_argument("--scene", choices=("induction", "agreement", "long", "generate", "corpus", "toy"),
                    help="what the window opens on: induction (default), or generate where --panel generate")
    ap.add_argument("--panel", choices=("focus", "anatomy", "prediction", "dla", "calc", "roles",
                                        "find", "generate", "corpus", "compare", "why", "circuits", "patching"),
                    default="focus",
                    help="side panel shown: the focus head (default), the Anatomy of its layer, "
                         "What heads do (prediction and lens, or DLA), the Calculator, Head roles "
                         "(its scores, or Find), Generate, Corpus, Compare, Why here?, Circuits or Patching")
    ap.add_argument("--ablate", type=_heads_to_switch_off, default=0, metavar="N",
                    help="switch off the N strongest induction heads first (induction and toy "
                         "scenes; any panel but patching)")
    ap.add_argument("--dock-width", type=int, default=0, help="side panel width in pixels")
    ap.add_argument("--hide-first", action="store_true", help="turn Hide first token on")
    ap.add_argument("--compare-type", default="Q4_0", help="--panel compare: B is A quantized to this")
    ap.add_argument("--roles-source", choices=("text", "probe", "agreement", "coreference"), default="text",
                    help="--panel roles: what the heads are scored on")
    ap.add_argument("--mid-probe", type=int, nargs="?", const=1, default=None, metavar="PERCENT",
                    help="--panel roles with a probe source: grab while the probe runs (a template "
                         "probe once its progress reaches PERCENT, default 1)")
    args = ap.parse_args(argv)
    if args.panel == "generate" and args.scene not in (None, "generate"):
        ap.error(f"--panel generate shows the generate scene's run: not with --scene {args.scene}")
    args.scene = args.scene or ("generate" if args.panel == "generate" else "induction")
    if args.ablate and args.scene not in ("induction", "toy") and not args.all:
        ap.error(f"--ablate switches off the induction or toy scene's strongest induction heads: "
                 f"not with --scene {args.scene}")
    if args.ablate and args.panel == "patching" and not args.all:
        ap.error("--ablate is not applied under --panel patching (it opens its own text and runs)")
    return args


def main() -> int:
    args = parse_args()
    if args.all:
        return make_all()

    from PySide6.QtCore import QSettings

    from attnviz.ui.app import create_window, make_app
    from attnviz.engine.analysing import heads
    from attnviz.engine.reading.registry import DEFAULT_TEXT
    from attnviz.engine.analysing.samples import SAMPLES
    import numpy as np

    app = make_app()
    settings = QSettings(str(Path(tempfile.mkdtemp(prefix="attnviz-shot-")) / "s.ini"),
                         QSettings.Format.IniFormat)
    texts = {s.title: s.text for s in SAMPLES}
    if args.scene == "induction":
        model, text = "SmolLM2-135M-Instruct", texts["Made-up names, repeated (induction)"]
    elif args.scene == "toy":
        model, text = "attnviz-toy-stdlib", texts["Repeated random sequence"]
    elif args.scene == "long":
        model, text = "SmolLM2-135M-Instruct", " ".join([texts["Long paragraph"]] * 10)
    elif args.scene == "generate":
        model, text = "SmolLM2-135M-Instruct", "The capital of France is"
    else:
        model, text = "all-MiniLM-L6-v2", DEFAULT_TEXT
    if args.panel == "patching":
        model, text = "SmolLM2-135M-Instruct", IOI_TEXT
    scan = _corpus_scan(Path(tempfile.mkdtemp(prefix="attnviz-shot-scan-"))) \
        if args.scene == "corpus" else None
    w = create_window(model=model, text=text, settings=settings)
    width, height = (int(v) for v in args.size.split("x"))
    w.resize(width, height)
    w.show()

    def settle(seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.01)

    def wait(condition, seconds: float = 120) -> None:
        end = time.perf_counter() + seconds
        while not condition() and time.perf_counter() < end:
            settle(0.05)
        if not condition():
            raise SystemExit(f"{args.scene}: the window did not get there in {seconds:.0f} s")

    st = w.state
    if args.scene == "long":
        try:
            wait(lambda: st.long.run is not None and st.long.progress[1] == 0
                 and st.long.pane is not None, 300)
        except SystemExit:
            raise SystemExit(f"long: run {st.long.run is not None}, progress {st.long.progress}, pane "
                             f"{st.long.pane is not None}, model {st.model_name}, text {len(st.text)} chars") from None
        wait(lambda: w.panels_ready)
        w.roles_dock.show()  # a long text's head scores, streamed layer by layer
        w.roles_dock.raise_()
        st.long.set_log(True)  # long-range weights are small: four decades below the top
        settle(1.0)
        wait(lambda: st.long.pane is not None and st.long.tiles is not None)
        # the head scores stream in, a layer at a time
        wait(lambda: "Scoring the heads" not in w.roles_panel.summary.text(), 300)
        settle(1.0)
        return _grab(w, args.out, f"long view, {st.long.T} tokens, log colours")
    wait(lambda: st.result is not None and w.panels_ready, 60)  # the side panels follow the first heatmaps
    r = st.result
    if args.scene == "generate":
        return _generate(w, settle, wait, args)
    if args.panel == "patching":
        return _patching(w, settle, wait, args)
    if args.scene in ("induction", "toy"):
        scores = heads.score_heads(r.attentions, r.input_ids).scores["induction"]  # [n_layer, n_head]
        layer, head = (int(i) for i in divmod(int(scores.argmax()), scores.shape[1]))
        q = len(r.labels) - 2  # last piece of the repeated place name, before the final "."
        k = int(r.attentions[layer, head, q].argmax())
        what = f"induction score {scores[layer, head]:.2f}"
        if args.ablate > scores.size:
            raise SystemExit(f"--ablate {args.ablate}: this model has {scores.size} heads "
                             f"({scores.shape[0]} layers of {scores.shape[1]})")
        strongest = [divmod(int(i), scores.shape[1]) for i in np.argsort(-scores, axis=None)[:args.ablate]]
    elif args.scene == "corpus":
        w.open_scan(str(scan))
        panel = w.corpus_panel
        wait(lambda: panel.values() is not None)
        panel.set_stat("previous")
        values = panel.values()  # [n_layer, n_head] of the scan's mean previous-token weight
        layer, head = (int(i) for i in divmod(int(values.argmax()), values.shape[1]))
        panel.pick_head(layer, head)
        settle(1.0)
        q = r.labels.index("are")
        k = q - 1  # the previous token, what the picked head attends to
        what = f"corpus mean previous {values[layer, head]:.2f}"
    else:
        q, k = r.labels.index("are"), r.labels.index("keys")
        weights = r.attentions[:, :, q, k]  # [n_layer, n_head]
        layer, head = (int(i) for i in divmod(int(weights.argmax()), weights.shape[1]))
        what = f"are → keys {weights[layer, head]:.2f}"
    st.set_view_mode(args.view)
    if args.hide_first:
        st.set_hide_first(True)
    st.set_layer(layer)
    st.set_focus(layer, head)
    st.set_query(q)
    if args.ablate:  # (before any panel's picture: every path below shows the changed run)
        from attnviz.engine.analysing.effects import Ablation

        st.effects.set_ablation(Ablation(heads=tuple(strongest)))
        what += "; switched off " + st.effects.ablation.describe()
        # the changed run is shown: the grid's result carries the edits
        wait(lambda: st.result is not None and bool(getattr(st.result.trace, "edits", None)), 60)
    w.focus_dock.raise_()
    settle(1.5)  # side panels finish their own background work
    dock = w.focus_dock
    if args.panel == "anatomy":
        dock = w.anatomy_dock
        dock.raise_()
        # the run that keeps the layer inputs, then the panel's drawing
        wait(lambda: st.result is not None and st.result.layer_inputs is not None
             and w.anatomy_panel.canvas.view is not None and not w.anatomy_panel.pending)
        settle(0.5)
    if args.panel in ("calc", "roles", "find", "corpus"):
        dock = {"calc": w.calc_dock, "roles": w.roles_dock, "find": w.roles_dock,
                "corpus": w.corpus_dock}[args.panel]
        dock.show()
        dock.raise_()
        settle(0.5)
        if args.panel == "find":
            _find(w.roles_panel, settle)
        if args.panel == "roles" and args.roles_source != "text":
            return _roles_probe(w, settle, wait, args)
        settle(2.0)  # the panel's scores or sizes, computed off the main thread
    if args.panel in ("prediction", "dla"):
        dock = w.predict_dock
        dock.show()
        dock.raise_()
        settle(0.3)
        dock.raise_()  # (a dock tab raised while the window still lays out its docks can lose)
        panel = w.predict_panel
        panel.tabs.setCurrentIndex(0 if args.panel == "prediction" else 1)
    if args.panel in ("prediction", "dla"):
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
        wait(lambda: w.why_jobs.attribution is not None and not w.why_jobs.busy, 60)
        from PySide6.QtCore import Qt

        tab = w.focus_dock.widget()  # (the Focus head tab's own docks: Why here? below the view)
        tab.resizeDocks([w.why_dock], [tab.height() * 5 // 8], Qt.Orientation.Vertical)
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
        wait(lambda: w.circuits_jobs.circuits is not None and w.circuits_jobs.ov is not None)
        settle(0.3)
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
    return _grab(w, args.out, f"L{layer} H{head}: {what}; query {r.labels[q]!r} → {r.labels[k]!r}")


def _grab(w, out: str, what: str) -> int:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not w.grab().save(str(out)):
        raise SystemExit(f"could not write {out}")
    print(f"wrote {out} ({what})")
    w.close()
    return 0


def _find(panel, settle) -> None:
    """Head roles' Find tab asked which heads send "are" to "keys"."""
    panel.tabs.setCurrentWidget(panel.find)
    settle(0.3)
    panel.find.set_find("are", "keys")
    settle(1.0)


IOI_TEXT = "When Mary and John went to the store, John gave a drink to"


def _patching(w, settle, wait, args) -> int:
    """The Patching tab on the indirect-object pair: head_out patched, the largest head clicked."""
    from attnviz.engine.analysing.patching import ranked

    dock, panel, jobs = w.patching_dock, w.patching_panel, w.patch_jobs
    dock.show()
    dock.raise_()
    if args.dock_width:
        from PySide6.QtCore import Qt

        w.resizeDocks([dock], [args.dock_width], Qt.Orientation.Horizontal)
    settle(0.3)
    panel.propose()
    panel.what_box.setCurrentText("head_out")
    if not panel.run():
        raise SystemExit(f"patching did not start: {jobs.note}")
    wait(lambda: jobs.result is not None and not jobs.running, 600)
    (layer, head), effect = ranked(jobs.result, 1)[0]
    w.state.set_layer(layer)
    panel.pick_head(layer, head)
    settle(1.5)
    return _grab(w, args.out, f"head_out, largest L{layer} H{head} effect {effect:+.3f}; {panel.swapped.text()}")


def _roles_probe(w, settle, wait, args) -> int:
    """Head roles scored on a probe: its scores, or (--mid-probe) the panel while the probe runs."""
    import re

    dock, panel, st = w.roles_dock, w.roles_panel, w.state
    if args.dock_width:
        from PySide6.QtCore import Qt

        w.resizeDocks([dock], [args.dock_width], Qt.Orientation.Horizontal)
    settle(0.3)
    panel.set_source(args.roles_source)
    if args.mid_probe is not None:
        def under_way() -> bool:
            text = panel.summary.text()
            if args.roles_source == "probe":
                return "probe" in text and st.head_scores is None
            percent = re.search(r"\((\d+)%\)…$", text)
            return percent is not None and int(percent.group(1)) >= args.mid_probe
        wait(under_way, 300)
        w.grab()  # (laid out and painted as it is now)
        return _grab(w, args.out, f"mid-probe: {panel.summary.text()!r}")
    wait(lambda: st.head_scores is not None or st.template_scores is not None, 300)
    settle(1.0)
    off = f"; switched off {st.effects.ablation.describe()}" if args.ablate else ""
    return _grab(w, args.out, f"{args.roles_source} probe scored{off}")


def _generate(w, settle, wait, args) -> int:
    """Eight greedy tokens after the prompt, the Generate panel shown with its last step."""
    dock, panel, g = w.generate_dock, w.generate_panel, w.state.generation
    dock.show()
    dock.raise_()
    if args.dock_width:
        from PySide6.QtCore import Qt

        w.resizeDocks([dock], [args.dock_width], Qt.Orientation.Horizontal)
    settle(0.3)
    panel.n_spin.setValue(8)
    panel.start()
    wait(lambda: not g.running and len(g.steps) > 0)
    wait(lambda: w.state.result is not None and w.state.text == g.text and w.state.preview is None)
    settle(1.5)
    return _grab(w, args.out, f"{len(g.steps)} new tokens: {g.text!r}")


if __name__ == "__main__":
    raise SystemExit(main())
