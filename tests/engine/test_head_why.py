"""Why a decoder predicts no next token, said truly: a sharded checkpoint lacking its unembedding
is named as a whole (its folder), not by its first shard; a tensor it holds at the wrong shape or
type is said to be unusable, and why, not missing."""

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from attnviz.engine import load_model
from attnviz.engine.errors import NoPrediction
from tiny import FIXTURES


def _refusal(folder) -> str:
    model = load_model(folder)
    assert model.run(ids=[1, 2, 3]).attentions.shape[0] == model.config.n_layer  # attention works
    with pytest.raises(NoPrediction) as err:
        model.lm_head()
    return str(err.value)


def test_a_sharded_checkpoint_without_its_unembedding_is_named_as_a_whole(tmp_path):
    folder = tmp_path / "sharded"
    shutil.copytree(FIXTURES / "llama_sharded", folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    shard = index["weight_map"].pop("lm_head.weight")
    assert shard != "model-00001-of-00003.safetensors"  # (the first shard never held it)
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    t = load_file(folder / shard)
    del t["lm_head.weight"]
    save_file(t, str(folder / shard))
    assert _refusal(folder) == ("sharded predicts no next token because the checkpoint in sharded/ "
                                "has no unembedding lm_head.weight")


def test_a_single_file_without_its_final_norm_is_said_to_lack_it(tmp_path):
    folder = tmp_path / "nonorm"
    shutil.copytree(FIXTURES / "llama_gqa", folder)
    t = load_file(folder / "model.safetensors")
    del t["model.norm.weight"]
    save_file(t, str(folder / "model.safetensors"))
    assert _refusal(folder) == ("nonorm predicts no next token because the checkpoint in nonorm/ "
                                "has no final norm model.norm.weight")


@pytest.mark.parametrize("name, value, why", [
    ("model.norm.weight", np.ones(63, np.float32),
     "its final norm model.norm.weight in model.safetensors has shape [63], but {config} implies [64]"),
    ("model.norm.weight", np.ones(64, np.int32),
     "its final norm model.norm.weight in model.safetensors is stored as I32, but it must be a float type"),
    ("lm_head.weight", np.ones((7, 64), np.float32),
     "its unembedding lm_head.weight in model.safetensors has shape [7, 64], but {config} implies "
     "[48, 64]"),
])
def test_a_tensor_held_at_the_wrong_shape_or_type_is_unusable_not_missing(tmp_path, name, value, why):
    folder = tmp_path / "bad"
    shutil.copytree(FIXTURES / "llama_gqa", folder)
    t = load_file(folder / "model.safetensors")
    assert name in t
    t[name] = value
    save_file(t, str(folder / "model.safetensors"))
    line = _refusal(folder)
    why = why.format(config=folder / "config.json")
    assert line.startswith(f"bad predicts no next token because {why}"), line
    assert "has no" not in line
