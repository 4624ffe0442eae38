"""Every token a figure shows (titles, notes, lines of text in its PNG/SVG, the hover read-outs the
panels show) is written as the window labels it: between quotes, no repr escapes. The labels here
hold a leading space ("·"), a quote and a backslash, and a byte piece ("<E6 9D>"); repr would write
the first as "·it's\\\\" in double quotes."""

import xml.etree.ElementTree as ET
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C
from attnviz.engine.analysing.patching import patch
from attnviz.engine.analysing.qk import qk_attribution, qk_trace
from attnviz.engine.computing.request import RunRequest
from attnviz.figures import anatomy, circuits, heatmaps, patching, why
from attnviz.figures.data import make_view
from tiny import FIXTURES

SHOWN = "\u00b7it's\\"  # the label of " it's\": a leading space, a quote and a backslash
BYTES = "<E6 9D>"  # the label of a piece holding part of a character
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
TEXT = ", ".join(map(str, IDS))  # (the fixture has no tokenizer: its text is typed ids)
CORRUPT = [3, 1, 4, 1, 5, 9, 2, 7, 5, 3, 5]


def painted_texts(svg: bytes) -> str:
    """The strings an SVG figure paints, one a line."""
    return "\n".join(e.text for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text)


def labels_with(n: int, **at: str) -> list[str]:
    """n plain labels, with the ones given by position ("p8"=...) replaced."""
    out = [f"t{i}" for i in range(n)]
    for key, label in at.items():
        out[int(key[1:])] = label
    return out


@pytest.fixture(scope="module")
def gpt2():
    return load_model(FIXTURES / "gpt2")


def test_the_why_here_title_names_query_and_key_as_labelled(qapp, gpt2):
    trace = qk_trace()
    result = gpt2.run(TEXT, trace=trace)
    view = why.why_view(qk_attribution(gpt2, trace, 1, 0, 8, 2), model=gpt2.name, result=result)
    view = replace(view, tokens=labels_with(len(IDS), p8=SHOWN, p2=BYTES))
    texts = painted_texts(why.svg_bytes(view, 900)[0])
    assert f"attends from '{SHOWN}' (8) to '{BYTES}' (2)" in texts


def test_the_patching_metric_line_and_read_out_name_tokens_as_labelled(qapp, gpt2):
    res = patch(gpt2, np.array(IDS), np.array(CORRUPT), "mlp_out")
    P = len(IDS) - 1
    clean, corrupt = labels_with(len(IDS), p10=SHOWN, p7=SHOWN), labels_with(len(IDS), p10=SHOWN, p7=BYTES)
    view = patching.patch_view(res, gpt2.name, list(map(str, IDS)), list(map(str, CORRUPT)), BYTES, SHOWN,
                               kv_group=gpt2.kv_group, labels=(clean, corrupt))
    assert view.position == P
    texts = painted_texts(patching.svg_bytes(view, 900)[0])
    assert f"at {P} '{SHOWN}': diff = logit('{BYTES}') \u2212 logit('{SHOWN}'); clean" in texts
    assert patching.where(view, 1, 7) == f"MLP L1 at 7 '{SHOWN}'/'{BYTES}'"  # the panel's hover
    assert patching.where(view, 0, P) == f"MLP L0 at {P} '{SHOWN}'"


def test_the_heatmap_note_names_the_hidden_first_token_as_labelled(qapp):
    rng = np.random.default_rng(0)
    att = rng.random((1, 2, 4, 4)).astype(np.float32)
    att /= att.sum(-1, keepdims=True)
    labels = [SHOWN, BYTES, "t2", "t3"]
    result = SimpleNamespace(text="fake text", tokens=["\u0120it's\\", "\u00e6\u013f", "t2", "t3"],
                             labels=labels, input_ids=np.arange(4), attentions=att, kv_group=np.arange(2))
    view = make_view(result, model="m", scope="layer", layer=0, hide_first=True)
    texts = painted_texts(heatmaps.svg_bytes(view, 900)[0])
    assert f"first token '{SHOWN}' hidden, rows renormalised" in texts


def test_the_circuits_ov_line_names_the_tokens_as_labelled(qapp, gpt2):
    ov = (1, 0, 5, SHOWN, [(3, BYTES, 1.5), (4, SHOWN, -0.25)], None)
    view = circuits.circuits_view(C.circuits(gpt2), model=gpt2.name, kv_group=gpt2.kv_group, focus=(1, 0), ov=ov)
    want = f"L1 H0 attending to '{SHOWN}' writes, in logits: '{BYTES}' +1.50, '{SHOWN}' \u22120.25"  # (the bars' minus)
    assert view.lines()[-1] == want  # (the panel's line under the map)
    painted = painted_texts(circuits.svg_bytes(view, 900)[0])
    assert want in painted
    assert "L1 H0's top partners among earlier heads (composition score, 0 to 1):" in painted  # (its numbers' scale)


def test_the_anatomy_hover_names_the_tokens_as_labelled(qapp, gpt2):
    result = gpt2.run(TEXT, request=RunRequest(inputs=True))
    view = anatomy.make_anatomy_view(gpt2, result, 1, 0)
    view = replace(view, labels=labels_with(len(IDS), p6=SHOWN, p2=BYTES))
    lay = anatomy.layout(view, 900)
    pat = lay.block("pattern")
    r = pat.rect
    T = len(IDS)
    text = anatomy.readout(view, lay, r.left() + r.width() * 2.5 / T, r.top() + r.height() * 6.5 / T)
    assert f"'{SHOWN}' \u2192 '{BYTES}'" in text
    x = next(b for b in lay.blocks if b.row_names is not None and b.kind != "pattern")
    i, j = 6, 0
    text = anatomy.readout(view, lay, x.rect.left() + x.rect.width() * (j + 0.5) / x.data.shape[1],
                           x.rect.top() + x.rect.height() * (i + 0.5) / x.data.shape[0])
    assert f"token 6 '{SHOWN}', col 0" in text


def test_the_patching_csv_reads_back_every_label_and_number(gpt2):
    """A label holding a quote or a comma is one cell of the CSV, read back as the window shows it."""
    import csv
    import io

    res = patch(gpt2, np.array(IDS), np.array(CORRUPT), "mlp_out")
    labels = labels_with(len(IDS), p7='\u00b7"\\', p8="a,b", p9=BYTES, p10=SHOWN)
    view = patching.patch_view(res, gpt2.name, list(map(str, IDS)), list(map(str, CORRUPT)), BYTES, SHOWN,
                               kv_group=gpt2.kv_group, labels=(labels, labels))
    rows = list(csv.reader(io.StringIO(patching.number_bytes(view, "csv").decode("utf-8"))))
    assert rows[0] == ["row", *labels]
    assert [r[0] for r in rows[1:]] == view.row_labels()
    np.testing.assert_array_equal(np.array([[float(v) for v in r[1:]] for r in rows[1:]]), view.values)
