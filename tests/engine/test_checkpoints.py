"""The toy model trained by scripts/train_toy.py and its checkpoints across training:
they load and run through the engine, checkpoints.json matches what the engine recomputes, the
registry lists them and the command line takes --checkpoint. No torch, no Qt."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.training import induction_scores
from attnviz.engine.computing.checkpoints import (
    CHECKPOINTS_FILE, check_index, checkpoint_record, load_checkpoints, model_at,
)
from attnviz.engine.errors import InputError
from attnviz.engine.reading.registry import TOY_MODEL, find_models

REPEATED = "The parser reads the token stream. The parser reads the token stream."


def test_the_toy_model_has_at_least_30_checkpoints_in_training_order(ckpts):
    assert ckpts is not None and len(ckpts) >= 30
    steps = [c.step for c in ckpts.infos]
    assert steps == sorted(set(steps)) and steps[0] == 0
    for c in ckpts.infos:
        assert c.tokens_seen is not None and c.icl_score is not None
        assert c.induction_score is not None and c.induction_head is not None
        assert c.train_loss is not None or c.step == 0
    assert ckpts.infos[-1].folder == "."  # the folder's own model.safetensors is the last one


def test_every_checkpoint_loads_and_runs(ckpts):
    last = None
    for i in range(len(ckpts)):
        r = ckpts.model(i).run(REPEATED)
        att = r.attentions
        assert att.shape[:2] == (2, 8)
        np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)
        assert not np.triu(att, 1).any()
        if last is not None:
            assert not np.allclose(att, last, atol=1e-4), f"checkpoint {i} equals {i - 1}"
        last = att
    assert ckpts.model(-1) is ckpts.base


def test_recorded_induction_scores_match_the_engine(ckpts):
    n = len(ckpts)
    picks = [0, n // 3, n // 2, 2 * n // 3, n - 1]
    for i, (layer, head, s) in zip(picks, induction_scores(ckpts, picks)):
        info = ckpts.infos[i]
        assert s == pytest.approx(info.induction_score, abs=1e-4), i
        assert (layer, head) == info.induction_head


def test_induction_rises_from_below_0_1_to_at_least_0_5(ckpts):
    ind = [c.induction_score for c in ckpts.infos]
    assert ind[0] < 0.1
    assert ind[-1] >= 0.5


def test_checkpoints_json_defines_its_scores(toy):
    meta = json.loads((toy.path / CHECKPOINTS_FILE).read_text(encoding="utf-8"))
    for key in ("icl_score", "induction_score", "train_loss", "tokens_seen"):
        assert key in meta["definitions"]
    assert "toy" in meta["description"].lower() and "docstrings" in meta["description"]


def test_the_checkpoints_fit_in_20_mb(toy):
    total = sum(p.stat().st_size for p in toy.path.rglob("*") if p.is_file())
    assert total <= 20_000_000, total  # 20 MB, decimal: the stricter reading


def test_checkpoint_indices_count_from_the_end_and_refuse_out_of_range(ckpts):
    n = len(ckpts)
    assert check_index(0, n) == 0 and check_index(-1, n) == n - 1 and check_index(-n, n) == 0
    for bad in (n, -n - 1, 10**6):
        with pytest.raises(InputError, match=f"checkpoint {bad} is out of range.*{n} checkpoints"):
            ckpts.model(bad)
    assert checkpoint_record(ckpts.model(3)) == {"index": 3, "step": ckpts.infos[3].step, "of": n}
    assert checkpoint_record(None) is None  # no model loaded (the export dialog asks)


def test_a_model_without_checkpoints_takes_only_0_and_minus_1():
    tb = load_model("attnviz-textbook")
    assert load_checkpoints(tb) is None
    assert model_at(tb, None) is tb and model_at(tb, 0) is tb and model_at(tb, -1) is tb
    with pytest.raises(InputError, match="no training checkpoints"):
        model_at(tb, 1)


def test_the_registry_lists_the_toy_model_with_its_checkpoints(ckpts):
    info = next(m for m in find_models() if m.name == TOY_MODEL)
    assert info.checkpoints == len(ckpts)
    assert "toy model" in info.license and "docstrings" in info.license
    assert all(m.checkpoints == 0 for m in find_models() if m.name != TOY_MODEL)


# ---------------------------------------------------------------- command line


def test_the_toy_model_ships_inside_a_built_wheel(built_wheel, toy):
    """pyproject's package-data installs every checkpoint with the package (attnviz.resources)."""
    import zipfile

    names = set(zipfile.ZipFile(built_wheel).namelist())
    want = {f"attnviz/resources/toy-stdlib-gpt2/{p.relative_to(toy.path).as_posix()}"
            for p in toy.path.rglob("*") if p.is_file()}
    assert len(want) >= 30 + 4 and want <= names, sorted(want - names)[:5]


def test_the_icl_score_drops_fastest_within_the_induction_rise(toy):
    meta = json.loads((toy.path / CHECKPOINTS_FILE).read_text(encoding="utf-8"))
    pc = meta["phase_change"]
    lo, hi = pc["induction_rise_steps"]
    a, b = pc["icl_steepest_drop_steps"]
    assert lo <= a < b <= hi, pc
    # the rise is sampled densely: at least 15 checkpoints inside it
    steps = [c["step"] for c in meta["checkpoints"]]
    assert sum(lo <= s <= hi for s in steps) >= 15
