"""The Circuits tab's line on what the focused head writes reads the key the head attends to most
at the picked query, and names it and the query, so it is not read as that cell's output for the
query's own token. (It took the picked query's token as the head's source: "L18 H6 attending to
'ok' writes …" while at 'ok' the head attended mostly to '.'.)"""

import json

import numpy as np

from attnviz.engine.analysing import circuits as C
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.engine.reading.token_text import quoted
from attnviz.figures.numbers import signed
from windows import WAIT, open_window

TEXT = "the cat sat on the mat and the cat sat"


def _a_head_looking_elsewhere(r):
    """(layer, head, query, key) of the last layer: the first head and query whose top key holds
    another token than the query."""
    att = r.attentions[-1]
    for h in range(att.shape[0]):
        for q in range(2, att.shape[1]):
            k = int(np.argmax(att[h, q]))
            if r.input_ids[k] != r.input_ids[q]:
                return r.attentions.shape[0] - 1, h, q, k
    raise AssertionError("every head's top key holds its query's token")


def test_the_line_names_the_top_key_and_reads_what_it_writes(qtbot, tmp_path):
    w = open_window(qtbot, tmp_path / "t.ini", model=TOY_MODEL, text=TEXT, panels=("why",))
    st, panel = w.state, w.circuits_panel
    w.circuits_dock.show()
    w.circuits_dock.raise_()
    qtbot.waitUntil(lambda: w.circuits_jobs.circuits is not None, timeout=WAIT)
    r = st.result
    layer, head, q, k = _a_head_looking_elsewhere(r)
    st.show_head(layer, head)
    st.set_query(q)
    qtbot.waitUntil(lambda: "writes, in logits:" in panel.ov.text(), timeout=WAIT)
    line = panel.ov.text()
    weight = float(r.attentions[layer, head, q, k])
    assert line.startswith(f"{head_title(layer, head)} at the query {quoted(r.labels[q])} (#{q}) attends "
                           f"most to {quoted(r.labels[k])} (#{k}, weight {weight:.2f}); attending to it, it "
                           "writes, in logits: "), line
    top = C.ov_top(st.model, layer, head, int(r.input_ids[k]), 10)
    assert line.endswith(", ".join(f"{quoted(t)} {signed(v, 2)}" for _i, t, v in top)), line
    # the exported numbers say the same
    (js,) = panel.export_to(str(tmp_path / "c.json"))
    ov = json.loads(js.read_text())["ov_head"]
    assert (ov["query"], ov["key"], ov["token_id"]) == (q, k, int(r.input_ids[k]))
    w.worker.wait_idle()
