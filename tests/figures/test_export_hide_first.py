"""A CSV exported with Hide first token says so: its numbers are the renormalised weights over
the keys after the first (what the window and the image show), not the model's attention, so the
layer export's weight column and the head export's corner name it, as the image's subtitle does."""

import csv
import io

import numpy as np

from attnviz.engine.computing.patterns import drop_first_key
from attnviz.figures.data import csv_text, make_view

SENTENCE = "The keys to the cabinet are on the table."


def test_a_csv_with_the_first_key_hidden_says_its_rows_are_renormalised(minilm):
    run = minilm.run(SENTENCE)
    layer = make_view(run, model="m", scope="layer", layer=2, hide_first=True)
    rows = list(csv.reader(io.StringIO(csv_text(layer))))
    assert rows[0][-1] == "weight (first key hidden, rows renormalised)"
    got = np.zeros((run.attentions.shape[1], len(run.labels), len(run.labels) - 1), np.float32)
    for _layer, head, q, _qt, k, kt, w in rows[1:]:
        assert kt == run.labels[int(k)] and int(k) >= 1
        got[int(head), int(q), int(k) - 1] = np.float32(w)
    want = np.stack([drop_first_key(a) for a in run.attentions[2]])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got.sum(-1), 1, atol=1e-5)  # an encoder: every row keeps keys
    head = make_view(run, model="m", scope="head", layer=2, head=5, hide_first=True)
    corner = next(csv.reader(io.StringIO(csv_text(head))))[0]
    assert corner == "query \\ key (first key hidden, rows renormalised)"
    plain = make_view(run, model="m", scope="layer", layer=2)
    assert csv_text(plain).splitlines()[0].endswith(",weight")
