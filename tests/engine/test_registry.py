"""Finding models: the bundled default, the Hugging Face cache (offline), folders by path."""

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine import ModelLoadError, find_models, load_model
from tiny import FIXTURES


def fake_hf_cache_entry(repo_id: str, source: Path) -> Path:
    """Lay out a model the way huggingface_hub's cache does: blobs, refs/main, snapshots/<rev>/."""
    cache = Path(os.environ["HF_HUB_CACHE"])
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    rev = "0123456789abcdef0123456789abcdef01234567"
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    (repo / "blobs").mkdir(exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(rev)
    for f in source.iterdir():
        blob = repo / "blobs" / f"{f.name}.blob"
        shutil.copy(f, blob)
        target = snap / f.name
        if not target.exists():
            target.symlink_to(blob)
    return snap


def test_default_model_found_first():
    models = find_models()
    assert models[0].name == "all-MiniLM-L6-v2" and models[0].source == "package"
    assert (models[0].n_layer, models[0].n_head, models[0].n_kv_head) == (6, 12, 12)


def test_hf_cache_models_are_found_and_loaded_offline():
    snap = fake_hf_cache_entry("tiny-org/tiny-gqa", FIXTURES / "llama_gqa")
    found = {m.name: m for m in find_models()}
    assert "tiny-org/tiny-gqa" in found
    info = found["tiny-org/tiny-gqa"]
    assert info.source == "hf-cache" and (info.n_head, info.n_kv_head) == (8, 2)
    assert Path(info.path) == snap
    for name in ("tiny-org/tiny-gqa", "tiny-gqa"):
        model = load_model(name)
        ref = np.load(FIXTURES / "llama_gqa" / "expected.npz")
        np.testing.assert_allclose(model.run(ids=ref["ids_1"].tolist()).attentions, ref["attn_1"],
                                   atol=1e-4)


def test_folder_and_file_paths(tmp_path):
    model = load_model(str(FIXTURES / "bert"))
    assert model.name == "bert" and model.config.family == "bert"
    assert load_model(FIXTURES / "bert" / "model.safetensors").config.n_layer == 2


def test_unknown_store_names_say_where_attnviz_looked():
    for name in ("ollama:no-such:1b", "ollama:hf.co/org/repo:Q4_K_M", "no-such-model.gguf"):
        with pytest.raises(ModelLoadError, match="LM Studio or Ollama.*attnviz models"):
            load_model(name)


def test_a_missing_gguf_path_is_named_a_file_not_a_folder(tmp_path):
    gone = tmp_path / "models" / "gone.gguf"
    with pytest.raises(ModelLoadError, match=r"no GGUF file at .*gone\.gguf: it was moved or deleted") as err:
        load_model(str(gone))
    assert "folder" not in str(err.value)
    with pytest.raises(ModelLoadError, match=r"no model folder at .*models/gone$"):
        load_model(str(tmp_path / "models" / "gone"))


def test_a_folder_holding_one_gguf_opens_it_and_one_of_several_names_them(tmp_path):
    from gguf_files import gguf_tensors, write_gguf

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    one = tmp_path / "lmstudio" / "org" / "tiny-GGUF"
    one.mkdir(parents=True)
    write_gguf(one / "tiny.Q8_0.gguf", cfg, tensors)
    model = load_model(str(one))  # File > Open model folder on LM Studio's folder of the model
    assert model.path == one / "tiny.Q8_0.gguf" and model.config.n_kv_head == 2
    write_gguf(one / "tiny.F16.gguf", cfg, tensors)
    with pytest.raises(ModelLoadError, match=r"tiny-GGUF is not a model folder \(it has no config.json\) "
                       r"and holds 2 GGUF files: open one of them \(tiny.F16.gguf, tiny.Q8_0.gguf\)"):
        load_model(str(one))
    with pytest.raises(ModelLoadError, match="empty is not a model folder: it has no config.json"):
        (tmp_path / "empty").mkdir()
        load_model(str(tmp_path / "empty"))
