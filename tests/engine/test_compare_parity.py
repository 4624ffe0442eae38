"""Compare's numbers against transformers (tests/make_circuits_fixtures.py): llama_gqa against the
same checkpoint with every tensor moved by 0.01 sin(1 + i), written here again (its sha256 is the
generator's), both run by transformers in float64; heads_jsd, heads_jsd_max, resid_cos, kld and
its statistics, same_top1 and the flips recomputed there from HF's attentions, hidden states and
logits."""

import hashlib
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import models_pair
from tiny import FIXTURES

REF = FIXTURES / "compare" / "llama_pair.npz"
# the engine (float32) and transformers (float64) agree within 1.8e-6 on the JSDs (bits; the
# largest row 0.35), 5e-9 on the cosines and 7.2e-7 on the KL divergences (nats, up to 0.18)
ATOL = 1e-5


def moved(tensors):  # as tests/make_circuits_fixtures.moved
    return {k: (v + 0.01 * np.sin(1.0 + np.arange(v.size)).reshape(v.shape)).astype(np.float32)
            for k, v in sorted(tensors.items())}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    ref = np.load(REF, allow_pickle=False)
    a_dir, b_dir = FIXTURES / "llama_gqa", tmp_path_factory.mktemp("llama_moved")
    shutil.copy(a_dir / "config.json", b_dir / "config.json")
    save_file(moved(load_file(a_dir / "model.safetensors")), b_dir / "model.safetensors")
    assert hashlib.sha256((b_dir / "model.safetensors").read_bytes()).hexdigest() == str(ref["b_sha256"])
    return models_pair(load_model(a_dir), load_model(b_dir), ref["ids"], C.compare_trace)


def test_compare_matches_transformers(pair):
    ref = np.load(REF, allow_pickle=False)
    got = C.compare(pair)
    for key in ("heads_jsd", "heads_jsd_max", "resid_cos", "kld"):
        np.testing.assert_allclose(got[key], ref[key], rtol=0, atol=ATOL, err_msg=key)
    assert got["kld_stats"] == pytest.approx({"mean": ref["kld"].mean(), "median": np.median(ref["kld"]),
                                              "p99": np.percentile(ref["kld"], 99), "max": ref["kld"].max()},
                                             abs=ATOL)
    same = ref["top1_a"] == ref["top1_b"]
    assert got["same_top1"] == pytest.approx(same.mean())
    assert [(f["position"], f["a_id"], f["b_id"]) for f in got["flips"]] == \
        [(t, ref["top1_a"][t], ref["top1_b"][t]) for t in np.flatnonzero(~same)]
    # numbers with room to be wrong: heads that moved by different amounts, some tokens kept
    assert np.ptp(ref["heads_jsd"]) > 0.005 and 0.2 < same.mean() < 0.9
