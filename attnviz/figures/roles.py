"""What the heads are scored on and the badges the grid writes on them, without Qt: the roles
panel's options (a source of ROLE_SOURCES and the cells left out), the badges of a set of scores,
and when a result's scores still hold for another result. AppState (ui/machinery/state.py) holds the options
and the scores and calls these."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.engine.analysing.probes import KINDS as PROBE_KINDS
from attnviz.figures.style import ROLE_SHORT

ROLE_SOURCES = ("text", "probe") + PROBE_KINDS  # typed text, the random repeat probe, the template probes
PROBE_NOTE = " (probe)"  # a badge from a probe: about the probe's sentences, not the typed one
SHORT_PROBE_NOTE = " (p)"  # the note in a title too narrow for it whole (its tooltip: the whole)
# the Overview's abbreviations, but a word for mixed (the Overview's "·" is its empty cell)
BADGE_SHORT = {**ROLE_SHORT, "mixed": "mix", "agreement": "agree", "coreference": "coref"}


@dataclass(frozen=True)
class RoleOptions:
    """What the roles panel scores on: a source of ROLE_SOURCES, and the cells left out."""

    source: str = "text"
    exclude_bos: bool = False  # zero the first key column (TransformerLens exclude_bos)
    exclude_current: bool = False  # zero the diagonal (exclude_current_token)

    def probe_key(self):
        """What a probe source's scores depend on: a template probe ignores the exclusion options."""
        if self.source == "text":
            return None
        return (self.source, self.exclude_bos, self.exclude_current) if self.source == "probe" else self.source


def role_badges(source: str, text_scores, scores_stale: bool, probe_scores) -> list[list[str]] | None:
    """The grid's role badges ([n_layer][n_head], or None) of the scores of `source`: none while the
    text's are stale. Labels from a probe are about the probe's sentences, not the typed sentence
    under them: each badge says so."""
    src = source
    if src == "text":
        hs = text_scores
        return None if hs is None or scores_stale else hs.labels
    if src == "probe":
        hs = probe_scores
        return None if hs is None else [[label + PROBE_NOTE for label in row] for row in hs.labels]
    ts = probe_scores
    if ts is None:
        return None
    labels = [["" for _ in range(ts.score.shape[1])] for _ in range(ts.score.shape[0])]
    for l, h, *_ in ts.labelled():
        labels[l][h] = ts.kind + PROBE_NOTE
    return labels


def short_badge(badge: str) -> str:
    """`badge` in the fewest letters that keep what it says, for a title too narrow for it whole:
    the role as the Overview abbreviates it, a probe's note kept as " (p)" ("ind (p)" for
    "induction (probe)"), so a short title never reads as a label of the typed text."""
    probe = badge.endswith(PROBE_NOTE)
    role = badge[:-len(PROBE_NOTE)] if probe else badge
    return BADGE_SHORT.get(role, role) + (SHORT_PROBE_NOTE if probe else "")


def same_patterns(a, b) -> bool:
    """Whether results a and b hold the very same attention weights (a rerun of the same text on the
    same weights for what a view wanted): their head scores are the same."""
    return (len(a.input_ids) == len(b.input_ids) and bool(np.array_equal(a.input_ids, b.input_ids))
            and bool(np.array_equal(a.attentions, b.attentions)))
