"""The Calculator's KV-cache lines multiply out as a reader multiplies them: the total is the
per-token figure × tokens × batch, or, past a sliding window, the sum written beside it."""

import re

import pytest
from PySide6.QtGui import QTextDocument



def plain(rich: str) -> str:
    doc = QTextDocument()
    doc.setHtml(rich)
    return doc.toPlainText()


def number(text: str) -> int:
    return int(text.replace(",", ""))


@pytest.mark.parametrize("preset", ["gemma-2-9b", "mistral-7b-v0.1", "gemma-3-1b", "llama-3-8b"])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_total_is_what_its_line_multiplies(calc_panel, preset, batch):
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData(preset))
    calc_panel.spins["seq_len"].setValue(8192)
    calc_panel.spins["batch"].setValue(batch)
    lines = plain(calc_panel.kv_label.text()).splitlines()
    per = number(re.match(r"per token: ([\d,]+) bytes", lines[1]).group(1))
    m = re.match(r"([\d,]+) tokens × batch ([\d,]+): ([\d,]+) bytes \([^)]*\)(?: = (.*))?$", lines[2])
    T, b, total = (number(m.group(k)) for k in (1, 2, 3))
    assert (T, b, total) == (8192, batch, calc_panel.result.kv_bytes_total)
    if m.group(4) is None:  # no sum written: the reader's per token × tokens × batch
        assert per * T * b == total, lines
        return
    sum_ = re.sub(r" \((the [\d,]+ window layers keep their|every layer keeps its) last [\d,]+ tokens\)$", "", m.group(4))
    expression = sum_.replace(",", "").replace(" bytes", "").replace("×", "*").replace("batch", "")
    assert re.fullmatch(r"[\d*+() ]+", expression), sum_
    assert eval(expression) == total, lines  # noqa: S307 (digits, +, *, brackets only)
    if "full layers" in lines[1]:  # the per-token figure split the same way adds up
        parts = re.search(r"= ([\d,]+) bytes on the \d+ full layers \+ ([\d,]+) on the", lines[1])
        assert number(parts.group(1)) + number(parts.group(2)) == per


UNITS = {"bytes": 1, "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30, "TiB": 2 ** 40}


def size(text: str) -> float:
    value, unit = text.split()
    return float(value) * UNITS[unit]


@pytest.mark.parametrize("preset, split", [("gemma-2-9b", True), ("llama-3-8b", False)])
@pytest.mark.parametrize("batch", [1, 3])
def test_the_comparison_table_multiplies_out(calc_panel, qtbot, preset, split, batch):
    """MHA / as given / MQA: each row's total is its per-token cache × tokens × batch as the table
    and the line under it say. Past Gemma 2's 4,096-token window the per-token column is the full
    and the window layers' apart, and the line says the window layers count 4,096 tokens (672 KiB
    per token alone beside 3.94 GiB at 8,192 tokens would be no product of them); a model
    without a window has one per-token figure and no line."""
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData(preset))
    calc_panel.spins["seq_len"].setValue(8192)
    calc_panel.spins["batch"].setValue(batch)
    t = calc_panel.compare_table
    assert t.rowCount() == 3
    for row in range(3):
        per = [size(p.strip("+ ")) for p in t.item(row, 2).text().split("\n")]  # (full, window)
        total = size(t.item(row, 3).text())
        want = (per[0] * 8192 + sum(per[1:]) * 4096) * batch
        assert want == pytest.approx(total, rel=0.005) and len(per) == 1 + split, (row, per, total)
    header = t.horizontalHeaderItem(2).text().replace("\n", " ")
    assert header == ("per token: full + window" if split else "per token")
    note = calc_panel.compare_note
    qtbot.waitUntil(lambda: note.isVisible() == split)
    if split:
        times = (f"(full layers' per token × 8,192 + window layers' × 4,096) × batch {batch}" if batch > 1
                 else "full layers' per token × 8,192 + window layers' × 4,096")
        assert note.text() == (f"Past the 4,096-token window: at 8,192 tokens = {times} (the 21 window layers "
                               f"keep only their last 4,096 tokens).")


@pytest.mark.parametrize("window_layers, n_layer, says", [
    ([0], 2, "(the 1 window layer keeps its last 1 token)"),
    ([0, 1], 3, "(the 2 window layers keep their last 1 token)"),
    ([0], 1, "(every layer keeps its last 1 token)"),
])
def test_the_window_s_words_agree_with_its_counts(qapp, window_layers, n_layer, says):
    """The KV line past a window counts its window layers and agrees with them and the tokens kept,
    as the note under the comparison table does (it read "the window layers keep their last 1
    token" of one window layer)."""
    from attnviz.engine.calc import calculate
    from attnviz.ui.panels.calc_views import kv_text

    r = calculate(d_model=64, n_head=1, n_layer=n_layer, seq_len=8, sliding_window=1,
                  sliding_window_layers=window_layers)
    assert plain(kv_text(r)).splitlines()[2].endswith(says)


def test_the_calculator_page_quotes_the_line_under_the_table_as_shown(calc_panel, qtbot):
    """docs/calculator.md quotes the line under the comparison table in the words the window shows
    (it gave the sum in numbers, which the line never writes)."""
    from pathlib import Path

    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData("gemma-2-9b"))
    calc_panel.spins["seq_len"].setValue(8192)
    calc_panel.spins["batch"].setValue(1)
    note = calc_panel.compare_note
    qtbot.waitUntil(note.isVisible)
    page = " ".join((Path(__file__).parents[2] / "docs" / "calculator.md").read_text().split())
    assert f"`{note.text()}`" in page
    assert f"`{calc_panel.compare_table.item(0, 2).text().replace(chr(10), ' ')}` per token" in page
    assert f"`{calc_panel.compare_table.item(0, 3).text()}` on its MHA row" in page
