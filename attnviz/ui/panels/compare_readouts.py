"""The Compare panel's read-outs (compare_panel.ComparePanel) in words: the summary under the
token strip (the JSD map's mean and its most moved head, the residual stream's drift, the KLD
statistics, same top-1), the induction heads that survived or were lost on the probe, and the
hovers of the token strip (a token's KL(A || B) and the two top-1 next tokens) and of the JSD
map (a head's JSD, its title whole)."""

from __future__ import annotations

import numpy as np

from attnviz.engine.analysing.compare import beside_threshold, moved_most, resid_drift
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import isolated, plural, quoted
from attnviz.figures import compare as F
from attnviz.figures import headmap
from attnviz.figures.numbers import plain_number
from attnviz.figures.painted import painted_in
from attnviz.ui.views.painted import window_origin


def summary_text(panel) -> str:
    d = panel.doc()
    if d is None:
        return ""
    jsd = np.asarray(d["heads_jsd"])
    every = f"{F.EVERY_KEY}: " if panel.state.hide_first else ""  # (as the map beside it)
    # (significant digits, as the map's caption: a JSD of 3e-05 bits is not "0.0000")
    parts = [f"{every}mean head JSD {plain_number(jsd.mean())} bits"]
    if jsd.max(initial=0.0) > 0:
        l, h, v = moved_most(jsd, 1)[0]
        parts.append(f"moved most {head_title(l, h)} ({plain_number(v)} bits)")
    else:  # (a model against itself: no head to name)
        parts.append("no head moved: every head's JSD is exactly 0")
    if len(d["resid_cos"]):
        parts.append(resid_drift(d["resid_cos"]))
    if d["kld_stats"] is not None:
        s = d["kld_stats"]
        parts.append(f"KL(A\u2016B) mean {F.nats(s['mean'])}, median {F.nats(s['median'])}, "
                     f"p99 {F.nats(s['p99'])}, max {F.nats(s['max'])} nats")
        n = len(d["flips"])
        flips = (f"{plural(n, 'flip')}: framed red in the strip above, each token's bar its KL" if n
                 else "no flips: A's and B's top-1 agree at every position; each token's bar in the strip above its KL")
        parts.append(f"same top-1 {d['same_top1']:.1%} ({flips})")
    return "; ".join(parts)


def induction_text(panel) -> str:
    ind = panel.jobs.induction
    if ind is None:
        return "Induction heads on the probe: computing\u2026" if panel.jobs.active else ""
    a, b, t = np.asarray(ind["a"]), np.asarray(ind["b"]), ind["threshold"]
    def fmt(lst):  # (a strength written on its side of the threshold: lost is never "0.40")
        return ", ".join(f"{head_title(l, h)} {beside_threshold(a[l, h], t)}\u2192"
                         f"{beside_threshold(b[l, h], t)}" for l, h in lst)
    return (f"Induction heads on the probe (strength \u2265 {ind['threshold']:g} in A): "
            f"survived {len(ind['survived'])}{': ' + fmt(ind['survived']) if ind['survived'] else ''}; "
            f"lost {len(ind['lost'])}{': ' + fmt(ind['lost']) if ind['lost'] else ''}")


def map_readout(panel, x: float, y: float) -> str | None:
    """The hover over the JSD map: its title whole on the title, a head's JSD on its cell."""
    lay = panel.map_layout
    if lay is None:
        return None
    if headmap.on_title(lay, y):  # whole (a narrow panel ends them in an ellipsis)
        return headmap.whole_title(panel.head_map(), lay)
    hit = headmap.hit(panel.head_map(), lay, x, y, panel.map.devicePixelRatioF(), window_origin(panel.map))
    if hit is not None and hit[0] == "head":
        d = panel.doc()
        l, h = hit[1], hit[2]
        return (f"{head_title(l, h)}: JSD mean {plain_number(d['heads_jsd'][l][h])} bits, "
                f"largest row {plain_number(d['heads_jsd_max'][l][h])} bits")
    return None


def strip_readout(panel, x: float, y: float) -> str | None:
    """The hover over the token strip: the token whose frame Qt paints under (x, y), its KL(A || B)
    and the two top-1 next tokens."""
    c, dpr, origin = panel.jobs.comparison, panel.strip.devicePixelRatioF(), window_origin(panel.strip)
    for t, r in enumerate(panel.strip_cells):  # (where its frame is painted, flipped or not)
        if painted_in(x, y, r, dpr, origin, framed=True):
            d = c.doc
            text = f"token {t} {quoted(isolated(c.result.labels[t]))}"
            if d["kld"] is not None:
                text += f": KL(A\u2016B) {F.nats(d['kld'][t])} nats; " + top1_text(c, t)
            return text
    return None


def top1_text(c, t: int) -> str:
    """The two top-1 next tokens after token t of comparison `c`, as the strip's hover reads them."""
    flip = next((f for f in c.doc["flips"] if f["position"] == t), None)
    if flip is not None:
        return f"top-1 flips: A {quoted(flip['a_token'])}, B {quoted(flip['b_token'])}"
    if c.tops is None:  # (the numbers of another comparison's ids: none to read)
        return "same top-1 in A and B"
    return f"same top-1 in A and B: {quoted(token_text(c.pair.a.model, int(c.tops[0][t])))}"
