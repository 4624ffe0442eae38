"""A head's tile title and its shorter forms, the same in the window's tiles (the grid's, the long
view's) and in the pictures exported of them: `L18 H6 · local  induction (probe)`, without the layer
every title shares (`H6 · local  induction (probe)`), with its role badge abbreviated (`H6 · local
ind (p)`: figures/roles.short_badge); the form a row takes (title_form), a title cut to a
width (cut_title), what short titles abbreviate (abbreviations), and what a title says between the
head's name and its badge (tile_marks), the one place the grid and its export both write it."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetricsF

from attnviz.engine.computing.patterns import head_title
from attnviz.figures.roles import BADGE_SHORT, PROBE_NOTE, SHORT_PROBE_NOTE, short_badge


def tile_marks(kind: str | None = None, off: bool = False, share: float | None = None) -> str:
    """What a head's title says between its name and its role badge, in the window's grid and the
    picture exported of it alike: its layer's kind (` · local (window 512)`), `  · off` where it
    is switched off, and with value weighting its share of the layer's summed head-output norms
    (`  · 12% out`)."""
    return ((f" \u00b7 {kind}" if kind else "") + ("  \u00b7 off" if off else "")
            + (f"  \u00b7 {100 * float(share):.0f}% out" if share is not None else ""))


def title_forms(layer: int, head: int, badge: str = "", marks: str = "", side: str = "") -> tuple[str, str, str]:
    """A head's tile title, then its shorter forms: without the layer and compared `side` every
    title of the view shares ("H6  induction (probe)"), then with its role badge abbreviated
    ("H6 ind (p)": figures/roles.short_badge). `marks` (" · local", "  · off") before the badge: a
    cut title loses the badge before them."""
    tail, short = (f"  {badge}", f"{'  ' if marks else ' '}{short_badge(badge)}") if badge else ("", "")
    return side + head_title(layer, head) + marks + tail, f"H{head}{marks}{tail}", f"H{head}{marks}{short}"


def title_form(forms: list, fits) -> int:
    """Which form every title of a row takes (0: whole): the first in which fits(j, text) holds for
    each title j, so the row reads alike; the shortest where none does."""
    n = max((len(f) for f in forms), default=1)
    return next((i for i in range(n) if all(fits(j, f[min(i, len(f) - 1)]) for j, f in enumerate(forms))), n - 1)


def cut_title(fm: QFontMetricsF, text: str, width: float, keep: str = SHORT_PROBE_NOTE) -> str:
    """`text` cut with "…" to `width` pixels where wider, its end `keep` (a probe's note) left
    whole where it ends so and the head's name ("H6") still fits before it: the role is cut first,
    never what it is about; narrower, the head's name goes before the note does."""
    if fm.horizontalAdvance(text) <= width:
        return text
    elide = Qt.TextElideMode.ElideRight
    if not (keep and text.endswith(keep)):
        return fm.elidedText(text, elide, width)
    cut = fm.elidedText(text[:len(text) - len(keep)], elide, width - fm.horizontalAdvance(keep))
    name = text.split(" ", 1)[0]
    if cut.startswith(name):
        return cut + keep
    # (a role without its probe note would read as the typed text's: the name alone, cut)
    return name + "…" if fm.horizontalAdvance(name + "…") <= width else fm.elidedText(name, elide, width)


def abbreviations(badges) -> str:
    """What the short forms of role badges `badges` abbreviate, as the Head roles legend says it:
    "ind = induction, mix = mixed, (p) = from the probe"; "" where none is abbreviated."""
    terms, probe = {}, False
    for badge in badges:
        probe = probe or badge.endswith(PROBE_NOTE)
        role = badge[:-len(PROBE_NOTE)] if badge.endswith(PROBE_NOTE) else badge
        if role and BADGE_SHORT.get(role, role) != role:
            terms[role] = f"{BADGE_SHORT[role]} = {role}"
    return ", ".join([*terms.values()] + ([f"{SHORT_PROBE_NOTE.strip()} = from the probe"] if probe else []))
