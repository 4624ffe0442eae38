"""The typing benchmark's window (benchmarks/typing_latency.py runs it and reports): the real window
offscreen, made ready as a user leaves it, a sentence typed into it key by key, each key timed to
its result painted and in stages, and the main thread's stalls."""

import os
import time

from benchmarks.scratch import scratch_settings


def _pct(values, p):
    import numpy as np

    return float(np.percentile(np.asarray(values), p)) if values else float("nan")


def by_rows(latencies, rows, tokens) -> dict | None:
    """A causal model's keys by what their run computed (its KV cache starts from the kept run
    sharing the longest prefix): the first key (typed into the empty box), the keys that computed
    no row (a kept run held every token), one new row, and two or more (the tokenizer re-split
    the last tokens: a typed letter joined the token before it, and no kept run held the new
    prefix). -> {group: (keys, p50, p95, max)}; None where every key computed every row (an
    encoder: no cache)."""
    if all(r == t for r, t in zip(rows, tokens)):
        return None
    groups = {"first": [latencies[0]],
              "0 rows": [x for k, (x, r) in enumerate(zip(latencies, rows)) if k and r == 0],
              "1 row": [x for k, (x, r) in enumerate(zip(latencies, rows)) if k and r == 1],
              "2+ rows": [x for k, (x, r) in enumerate(zip(latencies, rows)) if k and r >= 2]}
    return {g: (len(v), _pct(v, 50), _pct(v, 95), max(v) if v else float("nan"))
            for g, v in groups.items()}


def tick_timer():
    """A 1 ms precise timer on the main thread, started: (the timer, the list of its tick times)."""
    from PySide6.QtCore import Qt, QTimer

    ticks = []
    timer = QTimer()
    timer.setTimerType(Qt.TimerType.PreciseTimer)
    timer.setInterval(1)
    timer.timeout.connect(lambda: ticks.append(time.perf_counter()))
    timer.start()
    return timer, ticks


def _spin(app, seconds: float, until=None) -> None:
    """Run the event loop for `seconds`, or until `until()` holds."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and not (until is not None and until()):
        app.processEvents()
        time.sleep(0.001)


STAGES = (  # (key, what it is): the parts a keystroke's time is made of, in order, on the probe-free pass
    ("key", "key event to the run submitted (the text box, the state's text, the worker's request)"),
    ("queue", "submitted to the job's start on the pool's thread"),
    ("tokenize", "the job: the text tokenised (Model.prepare)"),
    ("engine", "the job: the run after tokenising (the forward pass, the result built)"),
    ("job", "the job: the rest of it (the worker's wrapper, the effects' window run)"),
    ("handoff", "job done to its result heard on the main thread (a queued signal)"),
    ("slots", "the result's slots on the main thread (the state, grid refill, side panels)"),
    ("to_paint", "slots done to the grid's paint starting (other events, the layout pass)"),
    ("paint", "the grid's paint, to the event loop's next turn"),
)


class StageClock:
    """Times each keystroke's stages (STAGES) in window `w`: the worker's compute jobs are wrapped
    (its submit, looked up on the instance at each call) and the model's prepare; the paint times
    come from the benchmark's paint watch. Times are perf_counter, per typed text, first time each."""

    def __init__(self, w):
        self.w, self.t, self.keys = w, {}, []
        worker = w.worker
        submit = worker.submit

        def timed_submit(kind, fn, on_done, request=None, *args, **kwargs):
            if kind != "compute":
                return submit(kind, fn, on_done, request, *args, **kwargs)
            t = self.t.setdefault(request.text, {})
            t.setdefault("submit", time.perf_counter())
            model = request.model
            prepare = model.prepare

            def timed_prepare(*a, **k):
                t0 = time.perf_counter()
                try:
                    return prepare(*a, **k)
                finally:
                    t.setdefault("tokenize", time.perf_counter() - t0)

            def job():
                t.setdefault("start", time.perf_counter())
                model.prepare = timed_prepare  # (one job at a time: the pool has one thread)
                try:
                    return fn()
                finally:
                    del model.prepare
                    t.setdefault("end", time.perf_counter())

            def done(req, value, error):
                t.setdefault("heard", time.perf_counter())
                on_done(req, value, error)
                t.setdefault("slots", time.perf_counter())
                compute = getattr(getattr(value, "result", value), "compute_s", None)
                if compute is not None:
                    t.setdefault("compute", compute)
            return submit(kind, job, done, request, *args, **kwargs)
        worker.submit = timed_submit
        self.previews = set()  # texts whose preview (the run's first layers) the state was given
        w.state.sigPreviewChanged.connect(lambda part: part is not None and self.previews.add(part.text))

    def clear(self) -> None:  # a new pass: its texts' stamps start afresh (the keys' stages stay)
        self.t.clear()
        self.previews.clear()

    def paint_begins(self, text: str) -> None:
        self.t.setdefault(text, {}).setdefault("paint", time.perf_counter())

    def key_done(self, text: str, t_key: float, t_shown: float) -> None:
        """The key that typed `text`, painted at t_shown: its stages' seconds (a key whose stamps
        are missing, such as one whose run was replaced, is left out)."""
        t = self.t.get(text, {})
        need = ("submit", "start", "end", "heard", "slots", "paint", "tokenize", "compute")
        if not all(k in t for k in need):
            return
        self.keys.append({
            "key": t["submit"] - t_key, "queue": t["start"] - t["submit"], "tokenize": t["tokenize"],
            "engine": t["compute"] - t["tokenize"],
            "job": (t["end"] - t["start"]) - t["compute"], "handoff": t["heard"] - t["end"],
            "slots": t["slots"] - t["heard"], "to_paint": t["paint"] - t["slots"],
            "paint": t_shown - t["paint"], "previewed": text in self.previews})

    def p50s(self) -> dict:
        """{stage: p50 seconds, ...}, {stage + '_p95': p95 seconds, ...} and 'keys': how many keys
        were timed."""
        out = {k: _pct([x[k] for x in self.keys], 50) for k, _ in STAGES}
        out.update({k + "_p95": _pct([x[k] for x in self.keys], 95) for k, _ in STAGES})
        out["keys"] = len(self.keys)
        out["previewed"] = sum(x["previewed"] for x in self.keys)
        return out


def anatomy_switches(app, w, n: int = 60) -> list[float]:
    """Switch head, then layer, alternately, n times with the Anatomy tab shown: each time from the
    setter to the panel's repaint done (the event loop run until its redraw has happened: the grid's
    and the focus view's repaints are in it too), with the panel's own rebuild + repaint, in wall
    clock and in main-thread CPU time."""
    st, panel = w.state, w.anatomy_panel
    n_layer, n_head = st.n_layer, st.n_head
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        if i % 2:
            st.set_layer((st.layer + 1) % n_layer)  # the focus follows the layer
        else:
            st.set_focus(st.layer, ((st.focus or (0, 0))[1] + 1) % n_head)
        app.processEvents()
        while panel.pending:
            app.processEvents()
        out.append((time.perf_counter() - t0, panel.last_draw_s, panel.last_draw_cpu_s))
    return out


def open_window(model: str | None, panels: tuple[str, ...], mode: str, layer: int | None,
                anatomy: str):
    """The window opened empty on `model`, its side panels' first round done, `mode` and `layer`
    on screen: (the application, the window)."""
    from attnviz.ui.app import make_app
    from attnviz.ui.app import create_window

    app = make_app()
    w = create_window(model=model, text="", settings=scratch_settings("settings.ini"), panels=panels)
    w.resize(1400, 860)
    w.show()
    st = w.state
    deadline = time.perf_counter() + 60
    while not w.panels_ready and time.perf_counter() < deadline:  # after the first compute (a
        # decoder without BOS gives no result for the empty text: its panels are built all the same)
        app.processEvents()
        time.sleep(0.002)
    settle = time.perf_counter() + 1.0  # let the side panels finish their first round
    while time.perf_counter() < settle:
        app.processEvents()
        time.sleep(0.002)
    st.set_view_mode(mode)
    if layer is not None:
        st.set_layer(layer)
    w.grid.refresh()
    if anatomy != "off" and not w.panels_ready:
        w._build_panel_docks()  # an empty first text gives no result, so no panels yet
        settle = time.perf_counter() + 0.5  # the new dock tabs are laid out before one is raised
        while time.perf_counter() < settle:
            app.processEvents()
            time.sleep(0.002)
    return app, w


def first_heatmaps_gaps(app, w, sentence: str) -> list[float]:
    """One word typed and taken back first: the window's first heatmaps after opening empty build
    the grid's titles and the colour bar's ticks, once per window; that stall is reported apart.
    The 1 ms timer's gaps meanwhile."""
    st = w.state
    warm_timer, warm_ticks = tick_timer()
    word = sentence.split()[0]
    w.text_box.setPlainText(word)
    _spin(app, 30, until=lambda: st.result is not None and st.result.text == word)
    _spin(app, 0.3)
    warm_timer.stop()
    warm_gaps = [b - a for a, b in zip(warm_ticks, warm_ticks[1:])]
    w.text_box.setPlainText("")
    _spin(app, 1.0)
    return warm_gaps


def show_effects(app, w, sentence: str) -> list:
    """The What heads do panel shown (prediction, lens and DLA follow every result), its first
    analysis done: the list each analysis shown from now on is added to, as (perf_counter, the
    analysis job's own seconds)."""
    analyses = []
    if not w.panels_ready:
        w._build_panel_docks()
    w.predict_dock.show()
    w.predict_dock.raise_()
    # one analysis before typing, of a word typed and taken back: the first one dequantises
    # the unembedding (once per model, ~0.15 s on SmolLM2), which is no keystroke's cost
    w.text_box.setPlainText(sentence.split()[0])
    end = time.perf_counter() + 30
    while w.state.effects.analysis is None and time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.002)
    w.text_box.setPlainText("")
    end = time.perf_counter() + 1.0
    while time.perf_counter() < end:
        app.processEvents()
        time.sleep(0.002)
    jobs = w.worker.effects_jobs
    w.state.effects.sigAnalysisChanged.connect(
        lambda: analyses.append((time.perf_counter(), jobs.last_analysis_s)))
    return analyses


def show_anatomy(app, w, anatomy: str) -> list:
    """A head focused and, "shown", the Anatomy tab raised and drawn: the list each of the panel's
    rebuild + repaint per result is added to while shown, as (seconds, CPU seconds)."""
    from PySide6.QtCore import QTimer

    st = w.state
    panel = getattr(w, "anatomy_panel", None)
    draws = []  # the Anatomy panel's rebuild + repaint per result while shown
    if anatomy != "off":  # "none": the same window and focused head, without the Anatomy panel
        st.set_focus(st.layer, 1)  # a head lit in the anatomy (and shown in the focus view)
        if anatomy == "shown":
            w.anatomy_dock.raise_()
        end = time.perf_counter() + 30
        while anatomy == "shown" and st.result is not None and (
                st.result.layer_inputs is None or panel.canvas.lay is None or panel.pending) \
                and time.perf_counter() < end:
            app.processEvents()
            time.sleep(0.002)
    if panel is not None:
        st.sigResultChanged.connect(lambda r: QTimer.singleShot(
            0, lambda: panel.shown and draws.append((panel.last_draw_s, panel.last_draw_cpu_s))))
    return draws


class Typist:
    """Types `sentence` into the window's empty text box key by key, each key when the one before
    has been painted: the grid's paints are watched (what it drew: the state's result, or a preview
    of the running text's first layers) and each key's stages timed (StageClock)."""

    def __init__(self, app, w, sentence: str, effects: bool, analyses: list):
        from PySide6.QtCore import QEventLoop, QTimer

        self.app, self.w, self.st, self.sentence = app, w, w.state, sentence
        self.effects, self.analyses = effects, analyses
        self.shown = {}  # text -> perf_counter when its result was painted
        self.first = {}  # text -> perf_counter when the grid first painted it (a preview of its run, or its result)
        self.waiting = QEventLoop()  # waits in Qt's C++ loop, so the worker thread gets the GIL
        self.watch = self._paint_watch()
        w.grid.gw.viewport().installEventFilter(self.watch)
        self.stages = StageClock(w)
        self.guard = QTimer()
        self.guard.setSingleShot(True)
        self.guard.timeout.connect(self.waiting.quit)

    def painted(self, text, whole):
        now = time.perf_counter()
        self.first.setdefault(text, now)
        if whole:
            self.shown.setdefault(text, now)
            if text == self.w.text_box.toPlainText():
                self.waiting.quit()

    def _paint_watch(self):
        from PySide6.QtCore import QEvent, QObject, QTimer

        typist, w, st, shown = self, self.w, self.st, self.shown

        class PaintWatch(QObject):
            """Each paint of the grid: what it drew (the grid's `drawn`: the state's result, or a
            preview of the running text's first layers); the time is taken when the paint is done."""

            def eventFilter(self, obj, ev):
                drawn = w.grid.drawn
                if ev.type() == QEvent.Type.Paint and drawn is not None and drawn.text not in shown:
                    whole = drawn is st.result
                    if whole:
                        typist.stages.paint_begins(drawn.text)
                    QTimer.singleShot(0, lambda: typist.painted(drawn.text, whole))
                return False

        return PaintWatch()

    def type_sentence(self, probe: bool):
        """Type the sentence into the empty box, key by key: (latencies, firsts, tokens, computes,
        key times, the stall probe's ticks, rows each key's run computed). probe: with the 1 ms
        timer running (the stall pass)."""
        from PySide6.QtCore import QEventLoop, QTimer
        from PySide6.QtTest import QTest

        app, w, st, shown, first, stages = self.app, self.w, self.st, self.shown, self.first, self.stages
        shown.clear()
        first.clear()
        stages.clear()
        if st.model is not None:  # typed as a new text: the KV cache keeps earlier texts' runs, and
            # the warm-up word's or the other pass's would give some keys their rows for free
            st.model.clear_cache()
        timer, ticks = tick_timer() if probe else (None, [])
        latencies, firsts, tokens, computes, key_times, rows = [], [], [], [], [], []
        w.text_box.setFocus()
        for ch in self.sentence:
            t_key = time.perf_counter()
            key_times.append(t_key)
            QTest.keyClick(w.text_box, ch)
            text = w.text_box.toPlainText()
            if text not in shown:
                self.guard.start(10000)
                self.waiting.exec()
                self.guard.stop()
            latencies.append(shown[text] - t_key)
            if not probe:
                stages.key_done(text, t_key, shown[text])
            firsts.append(first[text] - t_key)
            tokens.append(len(st.result.tokens))
            computes.append(st.result.compute_s)
            rows.append(st.result.cache_computed)  # T without a KV cache (an encoder: every row)
            pause = QEventLoop()  # idle in Qt's loop (QTest.qWait sleeps in 10 ms steps: false stalls)
            QTimer.singleShot(40, pause.quit)
            pause.exec()
        if self.effects:  # the last key's analysis: it comes once typing pauses
            analyses = self.analyses
            end = time.perf_counter() + 10
            while (not analyses or analyses[-1][0] < key_times[-1]) and time.perf_counter() < end:
                app.processEvents()
                time.sleep(0.001)
        if timer is not None:
            timer.stop()
        return latencies, firsts, tokens, computes, key_times, ticks, rows

    def both_passes(self, probe_first: bool) -> dict:
        """Two passes of the same keys: the latencies without the stall probe (its 1 ms Python timer
        wakes the main thread, which takes the GIL from the engine's thread: it is the benchmark's,
        not the app's: the 'with probe' column gives the same keys' figures with it), and the stall
        with it; probe_first swaps the passes (main() alternates it over the runs: neither pass is
        always first). {probe: type_sentence's answer}."""
        passes = {}
        profile_to = os.environ.get("ATTNVIZ_BENCH_PROFILE")  # cProfile of the main thread, probe-free pass
        for probe in ((True, False) if probe_first else (False, True)):
            prof = None
            if profile_to and not probe:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            passes[probe] = self.type_sentence(probe)
            if prof is not None:
                prof.disable()
                prof.dump_stats(profile_to)
            self.w.text_box.setPlainText("")
            _spin(self.app, 1.0)
        return passes


def print_keys(sentence: str, passes: dict, gaps: list[float]) -> None:
    """ATTNVIZ_BENCH_KEYS: each key of the probe-free pass, what its time was made of;
    ATTNVIZ_BENCH_TRACE: the stall pass's longest gaps, each by the key it followed."""
    latencies, _, tokens, computes, _, _, _ = passes[False]
    probed, _, _, _, key_times, ticks, _ = passes[True]
    if os.environ.get("ATTNVIZ_BENCH_KEYS"):  # each key of the probe-free pass: what its time was made of
        for k, (lat, n, c) in enumerate(zip(latencies, tokens, computes)):
            print(f"  key {k:3d} {sentence[k]!r:5} T={n:3d} latency {lat * 1e3:5.1f} ms, run {c * 1e3:5.1f} ms, "
                  f"rest {(lat - c) * 1e3:5.1f} ms")
    if os.environ.get("ATTNVIZ_BENCH_TRACE"):
        import bisect

        worst = sorted(range(len(gaps)), key=gaps.__getitem__)[-8:]
        for i in reversed(worst):
            k = bisect.bisect(key_times, ticks[i]) - 1
            print(f"  gap {gaps[i] * 1e3:6.1f} ms starting {(ticks[i] - key_times[k]) * 1e3:6.1f} ms "
                  f"after key {k} ({sentence[k]!r}), latency of that key {probed[k] * 1e3:.1f} ms")


def run_typing(mode: str, sentence: str, panels: tuple[str, ...], model: str | None = None,
               anatomy: str = "off", effects: bool = False, layer: int | None = None,
               probe_first: bool = False) -> dict:
    app, w = open_window(model, panels, mode, layer, anatomy)
    st = w.state
    warm_gaps = first_heatmaps_gaps(app, w, sentence)
    analyses = show_effects(app, w, sentence) if effects else []
    draws = show_anatomy(app, w, anatomy)
    typist = Typist(app, w, sentence, effects, analyses)
    passes = typist.both_passes(probe_first)
    latencies, firsts, tokens, computes, _, _, rows = passes[False]
    probed, _, _, _, key_times, ticks, _ = passes[True]
    switches = anatomy_switches(app, w) if anatomy == "shown" else []  # (total, panel, panel CPU)
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    print_keys(sentence, passes, gaps)
    w.close()
    return {
        "mode": mode, "keys": len(sentence), "max_T": max(tokens),
        "p50": _pct(latencies, 50), "p95": _pct(latencies, 95), "max": max(latencies),
        "probed_p50": _pct(probed, 50), "probed_p95": _pct(probed, 95),
        "first_p50": _pct(firsts, 50), "first_p95": _pct(firsts, 95), "first_max": max(firsts),
        "previews": sum(f < x - 1e-4 for f, x in zip(firsts, latencies)),
        "layer": st.layer,
        "compute_p50": _pct(computes, 50),
        # the run at the sentence's end (its last tokens: the slowest keys), and what a keystroke
        # takes besides its run (the key, the job's start, the result's slots, the paint)
        "compute_end_p50": _pct([c for c, n in zip(computes, tokens) if n >= max(tokens) - 2], 50),
        "rest_p50": _pct([x - c for x, c in zip(latencies, computes)], 50),
        "rest_p95": _pct([x - c for x, c in zip(latencies, computes)], 95),
        "by_rows": by_rows(latencies, rows, tokens),
        "stages": typist.stages.p50s(),
        "stall": max(max(gaps) - 0.001, 0.0) if gaps else float("nan"),
        "first_heatmaps_stall": max(max(warm_gaps) - 0.001, 0.0) if warm_gaps else float("nan"),
        "anatomy": anatomy, "anatomy_draws": len(draws), "switches": len(switches),
        "effects": effects, "analyses": len(analyses),
        "analysis_p50": _pct([a[1] for a in analyses], 50), "analysis_p95": _pct([a[1] for a in analyses], 95),
        **{f"anatomy_draw{cpu}_p{p}": _pct([d[i] for d in draws], p)
           for i, cpu in ((0, ""), (1, "_cpu")) for p in (50, 95)},
        **{f"switch{part}_p{p}": _pct([x[i] for x in switches], p)
           for i, part in ((0, ""), (1, "_panel"), (2, "_panel_cpu")) for p in (50, 95)},
        "switch_max": max(x[0] for x in switches) if switches else float("nan"),
    }
