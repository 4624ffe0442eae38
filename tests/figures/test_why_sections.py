"""The Why here? lists as the panel shows them: each adds up to the score (its rows' values to the
parts' sum, its shares to 100 %), its last row names how many parts it leaves out and is absent
where it leaves none out, on a tiny GPT-2 (biases everywhere) and on SmolLM2."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing import qk as Q
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.token_text import plural
from attnviz.figures import why
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]


class _Result:  # what why_view reads of a window's result
    text = ""

    def __init__(self, ids):
        self.labels = [str(i) for i in ids]
        self.input_ids = list(ids)


def _view(model, layer, head, q, k):
    r = model.run(ids=IDS, trace=Q.qk_trace(), request=RunRequest(use_cache=False))
    a = Q.qk_attribution(model, r.trace, layer, head, q, k)
    return a, why.why_view(a, model=model.name, result=_Result(IDS))


def _lists(model, layer, head, q, k):
    a, view = _view(model, layer, head, q, k)
    return a, why.sections(view)


def _check(a, secs):
    n = len(a.components)
    for sec, n_all, what in zip(secs, (n * n, n, n), ("pair", "component", "component")):
        values = [r.value for r in sec.rows]
        assert sum(values) == pytest.approx(a.total(), abs=1e-9 * np.abs(a.table).sum())
        assert sum(r.share for r in sec.rows) == pytest.approx(1.0, abs=1e-9)
        named = [r for r in sec.rows if r.components]
        rest = [r for r in sec.rows if not r.components]
        if len(named) == n_all:  # every part is a row: nothing is left out, no rest row
            assert rest == []
        else:
            assert [r.label for r in rest] == [f"the other {plural(n_all - len(named), what)}"]
            assert sec.rows[-1] is rest[0]


def _rest_texts(secs) -> list[str]:  # each list's last row as the panel and the figure write it
    return [why.row_text(s.rows[-1]) for s in secs]


def test_the_rest_row_of_one_part_says_one_in_words():
    """Lists one row short of every part: the rest row says "the other 1 pair" and "the other 1
    component", singular."""
    a, view = _view(load_model(FIXTURES / "gpt2"), 1, 0, 9, 2)
    n = len(a.components)
    secs = why.sections(view, pairs=n * n - 1, side=n - 1)
    assert [s.rows[-1].label for s in secs] == ["the other 1 pair", "the other 1 component",
                                                "the other 1 component"]
    assert [t.split("  ")[0] for t in _rest_texts(secs)] == [s.rows[-1].label for s in secs]


def test_the_rest_row_counts_thousands_with_a_comma(smollm2):
    """SmolLM2's 182 parts: the pair list (why.PAIRS rows) leaves out 182² − PAIRS pairs, written
    with a thousands comma."""
    a, view = _view(smollm2, 18, 6, 9, 2)
    n = len(a.components)
    assert n * n - why.PAIRS >= 1000
    secs = why.sections(view)
    label = f"the other {n * n - why.PAIRS:,} pairs"
    assert "," in label and secs[0].rows[-1].label == label
    assert _rest_texts(secs)[0].startswith(label + "  ")


@pytest.mark.parametrize("layer", [0, 1])
def test_every_list_adds_up_and_names_what_it_leaves_out(layer):
    model = load_model(FIXTURES / "gpt2")
    a, secs = _lists(model, layer, 0, 9, 2)
    _check(a, secs)
    if layer == 0:  # embed and bias: four pairs and two parts, all shown
        assert [len(s.rows) for s in secs] == [4, 2, 2]


def test_smollm2_lists_add_up(smollm2):
    a, secs = _lists(smollm2, 18, 6, 9, 2)
    _check(a, secs)
    assert all(not s.rows[-1].components for s in secs)  # 182 parts: each list leaves some out


def test_the_attention_only_toy_s_mlp_parts_are_noted_as_zeros(toy):
    """The toy's MLPs are stored as zeros: the subtitle (on screen and in an export) and the numbers
    say its L0 MLP part is 0 but for rounding; the parts still add to the score."""
    a, view = _view(toy, 1, 0, 8, 3)
    assert "L0.mlp" in a.components and abs(a.table[a.components.index("L0.mlp")]).max() < 1e-6
    note = ("attnviz-toy-stdlib's MLPs are stored as zeros (an attention-only model): each writes "
            "exactly 0, so its MLP parts here are 0 but for float rounding")
    assert view.subtitle().endswith(f"; {note} \u00b7 attnviz-toy-stdlib"), view.subtitle()
    assert why.numbers(view)["note"] == note
    _check(a, why.sections(view))
    gpt2 = _view(load_model(FIXTURES / "gpt2"), 1, 0, 8, 3)[1]
    assert "stored as zeros" not in gpt2.subtitle() and "note" not in why.numbers(gpt2)
