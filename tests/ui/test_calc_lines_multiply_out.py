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
    sum_ = re.sub(r" \((the window|all) layers keep their last [\d,]+ tokens\)$", "", m.group(4))
    expression = sum_.replace(",", "").replace(" bytes", "").replace("×", "*").replace("batch", "")
    assert re.fullmatch(r"[\d*+() ]+", expression), sum_
    assert eval(expression) == total, lines  # noqa: S307 (digits, +, *, brackets only)
    if "full layers" in lines[1]:  # the per-token figure split the same way adds up
        parts = re.search(r"= ([\d,]+) bytes on the \d+ full layers \+ ([\d,]+) on the", lines[1])
        assert number(parts.group(1)) + number(parts.group(2)) == per
