"""Real models for the calculator, read from `resources/presets.json` (each keeps its source)."""

from __future__ import annotations

import importlib.resources
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from attnviz.engine.calc import MLA, CalcInputs, arch_from_dict
from attnviz.engine.errors import CalcError

def _presets_path() -> Path:
    """resources/presets.json: beside the package in a checkout, inside it once installed."""
    checkout = Path(__file__).resolve().parents[3] / "resources" / "presets.json"
    if checkout.is_file():
        return checkout
    return Path(str(importlib.resources.files("attnviz.resources") / "presets.json"))


PRESETS_PATH = _presets_path()


@dataclass(frozen=True)
class Preset:
    id: str
    name: str
    inputs: CalcInputs  # seq_len left None: the calculator defaults it to max_positions
    attention_type: str
    notes: str
    source: str
    nominal_params: int | None  # the size the name or source states ("7B")
    known_total_params: int | None  # an exact, verified total
    raw: dict  # the preset's JSON entry, as stored


def preset_from_dict(entry: dict[str, Any]) -> Preset:
    """One JSON entry -> Preset; a malformed entry raises CalcError naming it."""
    pid = entry.get("id", "?")
    try:
        mla = MLA(**entry["mla"]) if entry.get("mla") else None
        window = entry.get("sliding_window")
        inputs = CalcInputs(
            d_model=entry["d_model"], n_head=entry["n_heads"], n_layer=entry["n_layers"],
            n_kv_head=entry.get("n_kv_heads"), d_head=entry.get("head_dim"),
            d_ff=entry.get("intermediate_size"), vocab_size=entry.get("vocab_size"),
            max_positions=entry.get("max_context"),
            sliding_window=window,
            sliding_window_layers=entry.get("window_layers") if window else None,
            mla=mla, arch=arch_from_dict(entry.get("arch")))
    except (KeyError, TypeError) as exc:
        raise CalcError(f"preset {pid!r} in {PRESETS_PATH.name} is malformed: {exc}") from None
    return Preset(
        id=pid, name=entry.get("name", pid), inputs=inputs,
        attention_type=entry.get("attention_type", ""), notes=entry.get("attention_notes", ""),
        source=entry.get("source", ""), nominal_params=entry.get("nominal_params"),
        known_total_params=entry.get("known_total_params"), raw=dict(entry))


@lru_cache(maxsize=4)
def load_presets(path: Path = PRESETS_PATH) -> dict[str, Preset]:
    """Every preset by id, in file order."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CalcError(f"cannot read presets from {path}: {exc}") from exc
    return {p.id: p for p in map(preset_from_dict, doc["presets"])}


def get_preset(preset_id: str) -> Preset:
    presets = load_presets()
    if preset_id not in presets:
        raise CalcError(f"unknown preset {preset_id!r}; known: {', '.join(presets)}")
    return presets[preset_id]


def preset_inputs(preset_id: str, **overrides: Any) -> CalcInputs:
    """A preset's inputs with some fields replaced (seq_len, batch, kv_dtype, n_kv_head...)."""
    return replace(get_preset(preset_id).inputs, **overrides)
