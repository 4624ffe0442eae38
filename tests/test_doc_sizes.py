"""Sizes the pages give in prose read as the app writes them (engine/reading/byte_sizes.format_bytes),
each worked out here from what the app measures, not typed in: SmolLM2's layers, packed and as
float32, one layer, its file; Gemma 3 270M's unembedding as float32; the toy model's files."""

import json
import re
from pathlib import Path

import pytest

from attnviz.engine.reading.byte_sizes import format_bytes
from conftest import smollm2_file

ROOT = Path(__file__).resolve().parents[1]


def _prose(name: str) -> str:
    return re.sub(r"\s+", " ", (ROOT / name).read_text())


def test_smollm2s_float32_layers_read_as_its_memory_line_writes_them(smollm2):
    sizes = smollm2.weights.layers.sizes
    total, one = format_bytes(sum(sizes)), format_bytes(max(sizes))
    assert f"{total} float32" in smollm2.memory  # the figure the window's memory line shows
    models = _prose("docs/models.md")
    assert f"(SmolLM2: {one}, where all {len(sizes)} take {total})" in models
    assert f"so, {total} as float32." in models


def test_smollm2s_packed_layers_read_as_its_memory_line_writes_them():
    pytest.importorskip("numba")
    from attnviz.engine.computing.load import load_gguf
    from attnviz.engine.reading import qpack

    asked = qpack.kernels_on()
    qpack.ask_for_kernels()
    try:
        model = load_gguf(smollm2_file())
    finally:
        qpack.ask_for_kernels(asked)
    packed = format_bytes(model.weights.layers.view_bytes())
    assert f"held in their file's blocks ({packed})" in model.memory
    assert f"SmolLM2's layers take {packed} so, " in _prose("docs/models.md")


def test_file_sizes_and_gemma3s_unembedding_read_as_the_app_writes_sizes():
    assert f"one {format_bytes(smollm2_file().stat().st_size)} Q4_1 GGUF" in _prose("README.md")
    presets = json.loads((ROOT / "resources" / "presets.json").read_text())["presets"]
    gemma = next(p for p in presets if p["id"] == "gemma-3-270m")
    unembedding = gemma["vocab_size"] * gemma["d_model"] * 4  # float32
    assert f"Gemma 3 270M's {format_bytes(unembedding)} float32 copy" in _prose("docs/models.md")
    toy = ROOT / "resources" / "toy-stdlib-gpt2"
    each = {p.stat().st_size for p in toy.rglob("*.safetensors")}
    assert len(each) == 1  # (every checkpoint the same size)
    whole = sum(p.stat().st_size for p in toy.rglob("*") if p.is_file())
    assert f"Stored as F16: {format_bytes(each.pop())} a checkpoint, {format_bytes(whole)} in all." in \
        _prose("docs/toy_model.md")
