"""Patching: the runs behind the Patching tab (ui/panels/patching_panel.py; the engine is
engine/analysing/patching.py).

Run checks the two texts on the main thread (tokenising is quick): texts of different lengths are
refused in one line and the two token lists kept aligned for the tab, and nothing runs. Otherwise a
'patching' job runs on a thread of its own (THREAD: a patching run takes minutes on a large model,
and the pool's one thread must stay free for typing), reporting progress; Run again or Cancel
makes it stale, and it stops before its next batch (newest wins). The clean and corrupted
predictions and their diff come as soon as the two runs are made, before the patched runs."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from PySide6.QtCore import QObject, Signal

from attnviz.engine.reading.token_text import tokens
from attnviz.engine.errors import Cancelled, InputError, ModelFileChanged
from attnviz.ui.machinery.runner import THREAD, describe_error, failure

log = logging.getLogger(__name__)

PATCH_KIND = "patching"
CHECK_KIND = "patching-check"  # the panel's check of its texts' lengths
SEP = "\u2502"  # between the columns of the aligned token lists


@dataclass(frozen=True)
class Ask:
    """What one Run asks, checked: both sides' ids and tokens, what to patch, the metric's tokens."""
    model: object
    clean: str
    corrupt: str
    ids_clean: np.ndarray
    tokens_clean: tuple
    ids_corrupt: np.ndarray
    tokens_corrupt: tuple
    what: str
    layer: int
    direction: str
    position: int  # P, 0..T-1 (the last token unless the user picked one)
    position_asked: int | None  # as the user gave it (None: the last token)
    target: int | None
    alt: int | None
    labels_clean: tuple  # the tokens' readable labels (the grid's)
    labels_corrupt: tuple
    target_text: str = ""  # target and alt as typed ('' for the defaults)
    alt_text: str = ""


@dataclass(frozen=True)
class Sides:
    """The clean and corrupted runs' predictions at P and the metric (before any patched run)."""
    metric: object  # patching.Metric
    top_clean: str  # the top-1 next token's text at P
    top_corrupt: str
    target_text: str
    alt_text: str
    attentions_clean: np.ndarray  # [n_layer, n_head, T, T]
    attentions_corrupt: np.ndarray


def alignment(tokens_a, tokens_b, labels=("clean", "corrupted")) -> str:
    """Two token lists one above the other, each column as wide as its wider token, with a ^ under
    every position where they differ (and where one list has run out); columns part at │ (tokens
    such as <|endoftext|> hold a |)."""
    n = max(len(tokens_a), len(tokens_b))
    a = list(tokens_a) + [""] * (n - len(tokens_a))
    b = list(tokens_b) + [""] * (n - len(tokens_b))
    w = [max(len(x), len(y), 1) for x, y in zip(a, b)]
    pad = max(len(s) for s in labels) + 1
    row = lambda name, xs: name.ljust(pad) + SEP.join(x.ljust(k) for x, k in zip(xs, w))  # noqa: E731
    marks = " " * pad + " ".join(("^" if (i >= len(tokens_a) or i >= len(tokens_b) or tokens_a[i] != tokens_b[i])
                                  else " ") * k for i, k in enumerate(w))
    return "\n".join([row(labels[0], a), row(labels[1], b), marks.rstrip()])


def check(model, clean: str, corrupt: str, what: str, layer: int, direction: str,
          target_text: str, alt_text: str, position: int | None = None) -> Ask:
    """Ask, or InputError in one line (a LengthError carries the alignment)."""
    from attnviz.engine.analysing.patching import WHATS, check_ids, check_model, check_reach
    from attnviz.engine.analysing.predict import position_index, vocab_token

    if what not in WHATS:
        raise InputError(f"what {what!r}: expected one of {', '.join(WHATS)}")
    check_model(model)
    sides = []
    for label, text in (("clean", clean), ("corrupted", corrupt)):
        try:
            sides.append(tokenised(model, text))
        except InputError as exc:
            raise InputError(f"the {label} text: {exc}") from None
    (ic, tc, lc), (id_, td, ld) = sides
    try:
        check_ids(ic, id_)
    except InputError as exc:
        differ = len(ic) and len(id_) and len(ic) != len(id_)  # (same tokens: nothing to align)
        raise LengthError(str(exc), alignment(lc, ld) if differ else "") from None
    P = position_index(len(ic), position)
    check_reach(model, ic, id_, P)
    target = vocab_token(model, target_text) if target_text.strip() else None
    alt = vocab_token(model, alt_text) if alt_text.strip() else None
    if not 0 <= layer < model.config.n_layer:
        raise InputError(f"layer {layer} is outside 0..{model.config.n_layer - 1}")
    return Ask(model, clean, corrupt, ic, tc, id_, td, what, layer, direction, P, position, target, alt, lc, ld,
               target_text, alt_text)


@dataclass(frozen=True)
class Lengths:
    """The Patching panel's check of its two texts: the clean text's labels (None: not tokenised),
    the line to say (an error, or both lengths when they differ), the aligned tokens, and the clean
    text tokenised (tokenised's, for the next check of the same text; None: not tokenised)."""
    labels: list[str] | None
    note: str | None
    aligned: str = ""
    clean: tuple | None = None


def check_lengths(model, text: str, corrupt: str, clean: tuple | None = None) -> Lengths:
    """Tokenise the clean text, and the corrupted one when given, as the panel's check needs (on
    a job: a long paste takes seconds to tokenise). corrupt "": the clean text only. `clean`: the
    clean text as an earlier check of the same text and model tokenised it (Lengths.clean), not
    tokenised again."""
    labels = list(clean[2]) if clean is not None else None
    try:
        if clean is None and model is not None and text:
            clean = tokenised(model, text)
            labels = list(clean[2])
        if clean is None or not corrupt:
            return Lengths(labels, None, clean=clean)
        _id, td, ld = tokenised(model, corrupt)
    except InputError as exc:
        return Lengths(labels, str(exc) if corrupt else None, clean=clean)
    if len(clean[1]) == len(td):
        return Lengths(labels, None, clean=clean)
    return Lengths(labels, f"the clean text is {tokens(len(clean[1]))} and the corrupted text {len(td)}: "
                           "patching needs texts of one length", alignment(labels, ld), clean)


def tokenised(model, text: str) -> tuple:
    """text -> (ids, tokens, labels), tokenised once, the labels as the grid shows them (a space
    as ·: Model.prepare's, as the window's run gives them); InputError as Model.encode."""
    prep = model.prepare(text)
    return prep.ids, tuple(prep.tokens), tuple(prep.labels)


class LengthError(InputError):
    """Two texts of different lengths, with their tokens aligned (PatchJobs.alignment)."""

    def __init__(self, message: str, aligned: str):
        super().__init__(message)
        self.aligned = aligned


class PatchJobs(QObject):
    """The Patching session: the newest run's sides, progress and result, or why there is none."""
    sigChanged = Signal()  # a new result, sides, note, running
    sigProgress = Signal(int, int)  # patched runs done, in all
    _sigProgress = Signal(int, int, int)  # job id, done, total (from the job's thread)
    _sigSides = Signal(int, object)  # job id, Sides (from the job's thread)

    def __init__(self, state, worker, parent: QObject | None = None):
        super().__init__(parent)
        self.state, self.worker = state, worker
        self.ask: Ask | None = None
        self.sides: Sides | None = None
        self.result = None  # patching.Patching of self.ask
        self.note = ""
        self.note_for = None  # the boxes (run's arguments) the note speaks of
        self.aligned = ""  # the two token lists aligned, when their lengths differ
        self.running = False
        self.progress = (0, 0)
        self._job_id = None
        self._kept = None  # (ask, sides, result) shown before the run under way
        self._sigProgress.connect(self._on_progress)
        self._sigSides.connect(self._on_sides)
        state.sigModelChanged.connect(lambda _m: self.cancel(clear=True))

    def run(self, clean: str, corrupt: str, what: str, layer: int = 0, direction: str = "denoise",
            target_text: str = "", alt_text: str = "", position: int | None = None) -> bool:
        """Check and start a patching run (the one before it stops); False with a note if refused."""
        from attnviz.engine.analysing import patching as PT
        from attnviz.engine.analysing.pair import texts_pair
        from attnviz.engine.computing.model import token_text

        model = self.state.model
        self._stop()  # (the view is told once, below, with this run's note or start)
        self.aligned = ""
        self.note_for = (clean, corrupt, what, layer, direction, target_text, alt_text, position)
        if model is None:
            self.note = "Load a model first"
            self.sigChanged.emit()
            return False
        try:
            ask = check(model, clean, corrupt, what, layer, direction, target_text, alt_text, position)
        except (InputError, ModelFileChanged) as exc:  # (the head and tokens read the model's file)
            self.note = str(exc) if isinstance(exc, InputError) else failure("Patching failed", str(exc))
            self.aligned = getattr(exc, "aligned", "")
            self.sigChanged.emit()
            return False
        if self.result is not None:  # (the last good map, back if this run fails or stops)
            self._kept = (self.ask, self.sides, self.result)
        self.ask, self.sides, self.result, self.note = ask, None, None, ""
        job_id = self._job_id = self.worker.claim(PATCH_KIND)

        def stale():
            return self._job_id != job_id

        def progress(done, total):  # (on the job's thread)
            self._sigProgress.emit(job_id, done, total)

        def work():
            head = PT.check_model(model)
            pair = texts_pair(model, ask.ids_clean, ask.ids_corrupt, PT.source_trace)
            m = PT.metric_of(model, head, pair, ask.position, ask.target, ask.alt)
            q = m.position
            from attnviz.engine.computing.logits import vocab_logits

            logits = vocab_logits(head, np.stack([pair.a.trace.resid[-1][q], pair.b.trace.resid[-1][q]]))
            self._sigSides.emit(job_id, Sides(
                m, token_text(model, int(np.argmax(logits[0]))), token_text(model, int(np.argmax(logits[1]))),
                token_text(model, m.target), token_text(model, m.alt),
                pair.a.trace.attentions, pair.b.trace.attentions))
            layers = [ask.layer] if ask.what == "head_out_by_pos" else None
            try:
                return PT.patch(model, ask.ids_clean, ask.ids_corrupt, ask.what, ask.position, m.target, m.alt,
                                ask.direction, progress=progress, cancelled=stale, layers=layers, pair=pair)
            except Cancelled:
                return None

        self.running, self.progress = True, (0, 0)
        self.sigChanged.emit()
        self.worker.submit(PATCH_KIND, work, self._on_done, (ask, job_id), THREAD, job_id=job_id)
        return True

    def forget_note(self, boxes: tuple) -> bool:
        """Drop the note of the last Run (a refusal, a failure, Cancelled) once the boxes it spoke of
        have changed (`boxes`: run's arguments as they are now): it may no longer hold. Whether it
        dropped one."""
        if not self.note or self.running or self.note_for in (None, boxes):
            return False
        self.note, self.aligned, self.note_for = "", "", None
        self.sigChanged.emit()
        return True

    def cancel(self, clear: bool = False) -> None:
        """Stop the run under way (it stops before its next batch); `clear` forgets the result too."""
        if self._stop(clear):
            self.sigChanged.emit()

    def _stop(self, clear: bool = False) -> bool:
        """cancel's work without telling the view; whether what it shows has changed."""
        was = self.running
        if self._job_id is not None:
            self._job_id = None
            self.worker.cancel(PATCH_KIND)
        self.running = False
        if clear:
            self.ask = self.sides = self.result = self._kept = None
            self.note = self.aligned = ""
        elif was:
            self._restore()
        if was:
            self.note = self.note or "Cancelled"
        return was or clear

    def _on_progress(self, job_id: int, done: int, total: int) -> None:
        if job_id == self._job_id:
            self.progress = (done, total)
            self.sigProgress.emit(done, total)

    def _on_sides(self, job_id: int, sides) -> None:
        if job_id == self._job_id:
            self.sides = sides
            self.sigChanged.emit()

    def _on_done(self, request, value, error) -> None:
        ask, job_id = request
        if job_id != self._job_id:  # (a new model cancels; another training step's map is dimmed)
            return
        self.running, self._job_id = False, None
        if error is not None:
            # (a refusal reads as the checks before the run do; the last good map stays)
            self.note = str(error) if isinstance(error, InputError) else failure("Patching failed", describe_error(error))
            if not isinstance(error, InputError):
                log.warning("patching failed: %s", self.note)
            self._restore()
        elif value is not None:
            self.result, self._kept = value, None
        else:
            self._restore()
        self.sigChanged.emit()

    def _restore(self) -> None:
        """The map shown before a run that gave none (refused, failed or stopped) back, with its
        own texts and sides (the panel dims it where the boxes have changed since)."""
        if self._kept is not None and self.result is None:
            self.ask, self.sides, self.result = self._kept
        self._kept = None
