"""The Calculator tab's FLOPs lines: each kind of preset shows the count by hand, under a heading that
says what is counted; MLA shows its form and why the heads-vs-one-head comparison is absent."""

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest  # noqa: E402

from attnviz.engine.calc import format_count  # noqa: E402
from tests.flops_by_hand import KINDS, expected  # noqa: E402


@pytest.mark.parametrize("kind", KINDS)
def test_the_flops_lines_show_the_count_by_hand(calc_panel, kind):
    pid = KINDS[kind]
    want = expected(pid)
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData(pid))
    lines = calc_panel.flops_label.text().split("<br>")
    assert lines[0].startswith("<b>Attention FLOPs of one decode step")
    assert f"one new token reading {want['T']:,} tokens" in lines[0]
    assert lines[0].endswith(f"all {want['L']} layers, W_O included")
    shown = [(line.split(" (")[0].split(": ")[0], line.rsplit(": ", 1)[1]) for line in lines[1:5]]
    mixed = "weights·latent" if want["one_head_matmul"] is None else "weights·V"
    assert shown == [("projections", format_count(want["projections"])),
                     ("q·kᵀ", format_count(want["qk"])), (mixed, format_count(want["av"])),
                     ("attention total", format_count(want["total"]))]
    last = lines[-1]
    if want["one_head_matmul"] is None:
        assert "MLA absorbed form" in lines[0]
        assert last.startswith("heads vs one head: not shown for MLA") and "ratio" not in last
    else:
        assert f"(ratio {want['total'] / want['one_head_matmul']:.3g})" in last
        assert ("the same matrix FLOPs" in last) == (kind == "MHA")
