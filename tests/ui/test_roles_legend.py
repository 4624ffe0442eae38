"""Head roles' Overview legend explains every abbreviation a grid tile's title can show: the
roles as the map and the titles shorten them, the template probes' kinds, and a probe's "(p)"."""

import os
import re

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from attnviz.engine.analysing.probes import KINDS as PROBE_KINDS  # noqa: E402
from attnviz.figures.roles import PROBE_NOTE  # noqa: E402
from attnviz.figures.style import ROLE_COLORS  # noqa: E402
from attnviz.ui.app import assemble  # noqa: E402
from attnviz.ui.panels.roles_panel import RolesPanel  # noqa: E402
from attnviz.figures.titles import title_forms  # noqa: E402
from windows import shown_label  # noqa: E402


def test_the_legend_names_every_abbreviation_a_tile_title_shows(qtbot):
    state, _ = assemble()
    panel = RolesPanel(state)
    qtbot.addWidget(panel)
    legend = shown_label(panel.overview.legend).replace("\xa0", " ")
    badges = [b + note for b in (*ROLE_COLORS, *PROBE_KINDS) for note in ("", PROBE_NOTE)]
    for badge in badges:
        short = title_forms(3, 6, badge)[-1].removeprefix("H6 ")
        for word in short.split(" "):
            if word in badge.split(" "):
                continue  # shown whole: nothing to explain
            full = "from the probe" if word == "(p)" else badge.removesuffix(PROBE_NOTE)
            # "ind = induction", or one of the names before " = " ("·/mix = mixed")
            assert re.search(rf"(^|[ /]){re.escape(word)}(/\S+)? = {full}\b", legend), (word, legend)
