"""The head scores AppState holds (ui/machinery/state.py): the typed text's scores under the roles
panel's options, a probe source's beside them, and the grid's badges (head_labels) that follow them.
AppState declares the signals; these are its methods for the scores."""

from __future__ import annotations

from PySide6.QtCore import QTimer

from attnviz.figures.roles import ROLE_SOURCES, RoleOptions, role_badges, same_patterns


class HeadScoresState:
    """AppState's head scores (its sigRoleOptionsChanged, sigHeadScoresChanged, sigProbeProgress,
    sigTextProgress and sigHeadLabelsChanged tell of them)."""

    def _init_head_scores(self) -> None:
        self.role_options = RoleOptions()
        self.text_scores = None  # HeadScores of `scores_result` (the typed text's run) under role_options
        self.scores_result = None  # the RunResult text_scores were computed on
        self.text_note = ""  # why there are no text scores ("" when none are due or they are on their way)
        self.scores_stale = False  # text_scores are an older result's; the new ones are on their way
        self.probe_scores = None  # of a probe source: HeadScores (random probe) or probes.TemplateScores
        self.probe_note = ""  # the random probe's description, or why the probe has no scores
        self.probe_progress = None  # probes.ProbeProgress of the template probe under way
        self.text_progress: tuple[int, int] | None = None  # (layers done, n) of a long text's scores
        self.sigModelChanged.connect(lambda _m: self._clear_scores(text=True))
        self.sigCheckpointChanged.connect(lambda _i: self._clear_scores(text=False))  # a probe reruns
        self.sigTextResultChanged.connect(self._scores_follow_result)
        # A new result's stale scores are told to the views after the frame that shows it: the
        # grid and the focus view read head_labels as they draw the result, so no old badge is
        # painted over it; the panels (the roles tables greyed, Find, the ablation list) follow
        # 2 ms later, off the keystroke's path (a 0 ms timer often fires before the grid's paint;
        # benchmarks/typing_latency.py measures the keystroke's frame).
        self._scores_later = QTimer(self)
        self._scores_later.setSingleShot(True)
        self._scores_later.setInterval(2)
        self._scores_later.timeout.connect(self._announce_scores)
        self._labels_untold = False  # head_labels changed after the frame: not yet emitted

    @property
    def head_scores(self):
        """The per-role HeadScores of the chosen source (the roles tables, Find's tooltips), or None
        (none yet, or a template probe: see template_scores)."""
        src = self.role_options.source
        return self.text_scores if src == "text" else self.probe_scores if src == "probe" else None

    @property
    def template_scores(self):
        """The template probe's TemplateScores while one is the source, else None."""
        return self.probe_scores if self.role_options.source not in ("text", "probe") else None

    @property
    def scores_note(self) -> str:
        return self.text_note if self.role_options.source == "text" else self.probe_note

    def set_role_options(self, source: str | None = None, exclude_bos: bool | None = None,
                         exclude_current: bool | None = None) -> None:
        """What the heads are scored on (ROLE_SOURCES) and which cells are left out; None keeps one.
        Another probe (or the random probe's options) drops the probe scores, rescored by the runner."""
        old = self.role_options
        opts = RoleOptions(old.source if source is None else str(source),
                           old.exclude_bos if exclude_bos is None else bool(exclude_bos),
                           old.exclude_current if exclude_current is None else bool(exclude_current))
        if opts.source not in ROLE_SOURCES:
            raise ValueError(f"role source {opts.source!r} is not one of {ROLE_SOURCES}")
        if opts == old:
            return
        self.role_options = opts
        if opts.probe_key() != old.probe_key():
            self.probe_scores, self.probe_note, self.probe_progress = None, "", None
        self.sigRoleOptionsChanged.emit(opts)
        self._scores_changed()

    def set_text_progress(self, done: int, n: int) -> None:
        """The runner's count of the layers a long text's scores have done (the roles panel shows it)."""
        self.text_progress = (int(done), int(n))
        self.sigTextProgress.emit(int(done), int(n))

    def set_text_scores(self, scores, result, note: str = "") -> None:
        """The runner's scores of the typed text's `result` (None with a note: why there are none)."""
        self.text_progress = None
        self.text_scores, self.scores_result, self.text_note = scores, result, str(note)
        self.scores_stale = result is not self.text_result
        self._scores_changed()

    def set_probe_progress(self, progress) -> None:
        """The runner's probes.ProbeProgress of the template probe under way: its steps done (layers
        run, then sentences scored) and their words (the roles panel shows them)."""
        self.probe_progress = progress
        self.sigProbeProgress.emit(int(progress.done), int(progress.total))

    def set_probe_scores(self, scores, note: str = "") -> None:
        """The runner's scores of the probe source (None with a note: why there are none)."""
        self.probe_scores, self.probe_note, self.probe_progress = scores, str(note), None
        self._scores_changed()

    def _clear_scores(self, text: bool) -> None:  # a new model (text too) or training step (probes)
        had = self.probe_scores is not None or self.probe_note or (
            text and (self.text_scores is not None or self.text_note))
        self.probe_scores, self.probe_note, self.probe_progress = None, "", None
        if text:
            self.text_scores, self.scores_result, self.text_note, self.scores_stale = None, None, "", False
        if had:
            self._scores_changed()

    def _scores_follow_result(self, result) -> None:
        """A new text_result (dense or long): the old text's scores are not its; they go when the
        result does, and stay greyed (stale, no badges) until the runner's new ones come."""
        self.text_progress = None  # (the count of an older text's scores)
        if result is None:
            self._clear_text_scores()
        elif (self.text_scores is not None and not self.scores_stale and self.scores_result is not None
              and self.scores_result is not result and result.attentions is not None
              and self.scores_result.attentions is not None and same_patterns(self.scores_result, result)):
            self.scores_result = result  # the same patterns run again (for value norms, layer inputs)
        elif self.text_scores is not None and not self.scores_stale and self.scores_result is not result:
            self.scores_stale = True
            self._scores_changed(after_frame=True)
        elif self.text_scores is None and self.text_note:
            self.text_note = ""
            self._scores_changed()

    def _clear_text_scores(self) -> None:
        if self.text_scores is None and self.scores_result is None and not self.text_note:
            return
        self.text_scores, self.scores_result, self.text_note, self.scores_stale = None, None, "", False
        self._scores_changed()

    def _scores_changed(self, after_frame: bool = False) -> None:
        """The badges follow the scores (the one place they do), and the views are told. With
        after_frame (a new result made the scores stale) head_labels changes now, for the views
        that draw the result, and the signals wait for the frame (_announce_scores)."""
        labels = role_badges(self.role_options.source, self.text_scores, self.scores_stale,
                             self.probe_scores)
        if after_frame:
            if labels != self.head_labels:
                self.head_labels, self._labels_untold = labels, True
            self._scores_later.start()
            return
        self._scores_later.stop()  # told now, with what is newest
        untold, self._labels_untold = self._labels_untold, False
        if labels != self.head_labels or untold:
            self.head_labels = labels
            self.sigHeadLabelsChanged.emit(labels)
        self.sigHeadScoresChanged.emit()

    def _announce_scores(self) -> None:
        untold, self._labels_untold = self._labels_untold, False
        if untold:
            self.sigHeadLabelsChanged.emit(self.head_labels)
        self.sigHeadScoresChanged.emit()
