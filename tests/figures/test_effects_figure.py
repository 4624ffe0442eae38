"""The What heads do views as files: the numbers of the prediction, the lens and DLA are the
analysis's own (DLA's parts add up to the logit difference), a DLA PNG paints each head's cell in
the colour of its sign, and an image's sidecar opens as a view that names the ablation."""

import io
import json

import numpy as np
import pytest
from PySide6.QtGui import QImage

from attnviz.engine import load_model
from attnviz.engine.analysing.effects import Ablation, analyse, window_run
from attnviz.figures import effects as fig
from attnviz.figures import headmap
from attnviz.figures.data import open_sidecar
from attnviz.figures.write import export_view
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


@pytest.fixture(scope="module")
def views():
    model = load_model(FIXTURES / "gpt2")
    run = window_run(model, "", ids=IDS, ablation=Ablation(heads=((1, 0),)))
    a = analyse(model, run, position=8)
    return {k: fig.effects_view(k, a, model=model.name, result=run.result, kv_group=model.kv_group)
            for k in fig.VIEWS}


def test_the_numbers_are_the_analysis_own(views, tmp_path):
    dla = views["dla"]
    a = dla.analysis
    doc = json.loads(fig.number_bytes(dla, "json"))
    assert doc["position"] == 8 and doc["ablation"] == {"heads": [[1, 0]], "mode": "zero", "knockouts": []}
    rest = doc["dla_rest"]
    total = np.sum(doc["dla"]) + np.sum(rest["mlp"]) + rest["embed"] + rest["bias"]
    assert total == pytest.approx(doc["logit_diff"], abs=1e-3)
    np.testing.assert_array_equal(np.asarray(doc["dla"]), a.dla.heads)
    pred = json.loads(fig.number_bytes(views["prediction"], "json"))
    assert [t["id"] for t in pred["top"]] == a.clean.top_ids.tolist()
    assert pred["delta_target_logprob"] == pytest.approx(a.delta_target())
    lens = json.loads(fig.number_bytes(views["lens"], "json"))["lens"]
    assert len(lens) == 2 and lens[-1]["target_logprob"] == pytest.approx(float(a.changed.logprobs[a.target]))
    (tmp_path / "l.npy").write_bytes(fig.number_bytes(views["lens"], "npy"))
    assert np.load(tmp_path / "l.npy")["target_logprob"].shape == (2,)
    assert fig.csv_text(views["prediction"]).splitlines()[0].endswith(",id,token,logprob,changed_id,"
                                                                     "changed_token,changed_logprob")


def _csv(view) -> tuple[str, list[list[str]]]:
    """A CSV export's first header cell and its rows after the header."""
    import csv
    import io

    rows = list(csv.reader(io.StringIO(fig.csv_text(view))))
    return rows[0][0], rows[1:]


def test_each_csv_and_npy_says_what_its_numbers_are_about(views):
    """The CSVs name the query, the tokens compared, the unit and the ablation in their first header
    cell (as the heatmaps' CSV names its options), and each .npy holds every number of its view with
    the token ids, all equal to the JSON's. (The DLA CSV said no target, alt, unit or ablation, its
    .npy held the heads alone; the lens CSV named no target; the prediction .npy had no token ids.)"""
    a = views["dla"].analysis
    t, alt = f"'{a.label(a.target)}' (id {a.target})", f"'{a.label(a.alt)}' (id {a.alt})"
    after, changed = "after '5' (token 8)", "changed run: zero-ablated L1 H0"
    corner, rows = _csv(views["dla"])
    assert corner == (f"layer ({after}; each cell a part of logit({t}) − logit({alt}) = "
                      f"{a.dla.logit_diff:.6f}, in logits; {changed})")
    assert [r[0] for r in rows] == ["0", "1", "embed", "bias"]
    corner, rows = _csv(views["lens"])
    assert corner == f"layer ({after}; target {t}; raw logit lens, log-probs in nats; {changed})"
    corner, rows = _csv(views["prediction"])
    assert corner == f"rank ({after}; log-probs in nats; {changed})" and len(rows) == len(a.clean.top_ids)
    for kind in fig.VIEWS:
        doc = json.loads(fig.number_bytes(views[kind], "json"))
        got = np.load(io.BytesIO(fig.number_bytes(views[kind], "npy")), allow_pickle=False)
        assert {k: got[k].item() for k in ("position", "target", "alt", "target_token", "alt_token")} == \
            {k: doc[k] for k in ("position", "target", "alt", "target_token", "alt_token")}
        assert str(got["ablation"]) == "zero-ablated L1 H0"
    got = np.load(io.BytesIO(fig.number_bytes(views["dla"], "npy")))
    doc = json.loads(fig.number_bytes(views["dla"], "json"))
    assert got["dla"].tolist() == doc["dla"] and got["mlp"].tolist() == doc["dla_rest"]["mlp"]
    assert (got["embed"].item(), got["bias"].item(), got["logit_diff"].item()) == \
        (doc["dla_rest"]["embed"], doc["dla_rest"]["bias"], doc["logit_diff"])
    got = np.load(io.BytesIO(fig.number_bytes(views["prediction"], "npy")))
    doc = json.loads(fig.number_bytes(views["prediction"], "json"))
    for pre, key in (("", "top"), ("changed_", "changed_top")):
        assert got[f"{pre}top_id"].tolist() == [r["id"] for r in doc[key]]
        assert got[f"{pre}top_token"].tolist() == [r["token"] for r in doc[key]]
        assert got[f"{pre}top_logprob"].tolist() == [r["logprob"] for r in doc[key]]
    assert got["delta_target_logprob"].item() == doc["delta_target_logprob"]


def test_a_dla_png_paints_each_head_by_its_sign_and_its_sidecar_opens(qapp, views, tmp_path):
    view = views["dla"]
    out = tmp_path / "dla.png"
    written = export_view(view, out, width=800)
    assert written == [out, tmp_path / "dla.png.json"]
    img = QImage(str(out))
    lay = fig.layout(view, 800)
    k = 800 / fig.MAP_WIDTH
    heads = view.analysis.dla.heads
    for (l, h) in [(0, 0), (0, 1), (1, 1)]:
        cx, cy = headmap.cell_center(fig.head_map(view), lay.map_layout, l, h)
        c = img.pixelColor(int(cx * k), int(3 * 22 * lay.scale + cy * k))
        if abs(heads[l, h]) > 0.2 * np.abs(heads).max():
            assert (c.red() > c.blue()) == (heads[l, h] > 0), (l, h, c.name())
    meta = open_sidecar(out)
    assert meta["view"] == "dla" and meta["ablation"]["heads"] == [[1, 0]] and meta["position"] == 8
    svg = export_view(views["lens"], tmp_path / "lens.svg", width=700)
    assert b"logit lens (raw: the final norm applied to each layer)" in svg[0].read_bytes()


def painted_texts(svg: bytes) -> list[str]:
    """The strings an SVG figure paints, in order."""
    import xml.etree.ElementTree as ET

    return [e.text for e in ET.fromstring(svg).iter() if e.tag.endswith("text") and e.text]


@pytest.mark.parametrize("kind", fig.VIEWS)
def test_the_title_names_the_query_token_as_the_window_labels_it(qapp, views, kind):
    """A token with a quote and a backslash is written between quotes as the window shows it, not
    as Python's repr would escape it."""
    from dataclasses import replace

    view = views[kind]
    labels = list(view.labels)
    labels[8] = "it's\\"
    texts = painted_texts(fig.svg_bytes(replace(view, labels=labels), 700)[0])
    name = {"prediction": "Next token", "lens": "Logit lens", "dla": "Direct logit attribution"}[kind]
    assert texts[0] == f"{name} after 'it's\\' (token 8), gpt2"


def test_the_dla_caption_and_the_changed_line_write_a_rounding_zero_without_a_minus(qapp, views):
    """A logit difference, a sum of DLA's parts and a Δ log p that are 0 up to float rounding
    (-2e-7) read +0.000 in the painted figure, never -0.000."""
    from dataclasses import replace

    a = views["dla"].analysis
    d = replace(a.dla, logit_diff=-2e-7, heads=np.zeros_like(a.dla.heads), mlp=np.zeros_like(a.dla.mlp),
                embed=-3e-7, bias=0.0)
    changed = replace(a.changed, logprobs=a.clean.logprobs - 2e-7)
    tiny = replace(a, dla=d, changed=changed)
    texts = [t for kind in ("dla", "prediction")
             for t in painted_texts(fig.svg_bytes(replace(views[kind], analysis=tiny), 700)[0])]
    assert any(t.endswith("= +0.000; parts add to +0.000") for t in texts), texts
    painted = "".join(texts)  # (SVG may split a line's text into pieces)
    assert f"Δ log p({a.label(a.target)}) = +0.000 nats" in painted, texts
    assert "-0.000" not in painted


def test_the_lens_ranks_count_from_1_in_the_figure_and_every_export(qapp, views):
    """The figure paints the target's rank as '#1' for the layer's top-1; the CSV, the JSON (and so
    the sidecar) and the NPY give the same numbers, not the engine's 0-based index."""
    import csv
    import re

    view = views["lens"]
    want = view.analysis.lens.target_ranks + 1  # the engine counts how many tokens beat the target
    painted = [int(m.group(1)) for t in painted_texts(fig.svg_bytes(view, 700)[0])
               if (m := re.search(r"  #(\d+)$", t))]
    assert painted == want.tolist() and min(painted) >= 1
    rows = list(csv.DictReader(io.StringIO(fig.csv_text(view))))
    assert [int(r["target_rank"]) for r in rows] == painted
    doc = json.loads(fig.number_bytes(view, "json"))
    assert [r["target_rank"] for r in doc["lens"]] == painted
    npy = np.load(io.BytesIO(fig.number_bytes(view, "npy")))
    assert npy["target_rank"].tolist() == painted
