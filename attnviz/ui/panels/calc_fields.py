"""The Calculator's inputs (ui/panels/calc_panel.py): the preset list, one spin box per shape and
run field and the KV dtype, and what a model's numbers show in them. The panel edits them and
recomputes; these only make the widgets and read a model into their values."""

from __future__ import annotations

from PySide6.QtCore import QLocale, Qt
from PySide6.QtWidgets import QComboBox, QSpinBox

from attnviz.engine.calc import KV_DTYPE_BITS, CalcInputs
from attnviz.engine.reading.hf_config import default_d_head
from attnviz.ui.panels.calc_notes import typeset
from attnviz.ui.panels.calc_views import mla_fields

LOADED, CUSTOM = "__loaded__", "__custom__"
DEFAULT_PRESET = "llama-2-7b"  # the lesson's 4096 / 32 heads

# form field -> (label, tooltip, minimum, maximum)
FIELDS = {
    "d_model": ("d_model", "Model width: the size of each token's vector in the residual stream.",
                1, 1 << 20),
    "n_head": ("n_head", "Query heads per layer.", 1, 1 << 16),
    "n_kv_head": ("n_kv_head", "Key/value heads per layer: n_head for MHA, 1 for MQA, a divisor "
                  "of n_head in between for GQA (each KV head serves n_head / n_kv_head query "
                  "heads).", 1, 1 << 16),
    "d_head": ("d_head", "Width of one head. 'auto' = d_model / n_head; some models set it "
               "explicitly (Gemma-7B: 16 × 256 = 4,096 ≠ 3,072).", 0, 1 << 16),
    "n_layer": ("n_layer", "Transformer layers; each keeps its own K/V cache.", 1, 1 << 14),
    "seq_len": ("seq_len", "Tokens held in the KV cache for the totals and the comparison "
                "(defaults to the model's longest context).", 1, 2_000_000_000),
    "batch": ("batch", "Sequences cached at once; the cache grows linearly with it.", 1, 1 << 24),
}
RUN_FIELDS = ("seq_len", "batch")  # how a model is run, not which model it is


def preset_combo(presets: dict) -> QComboBox:
    """The preset list: the loaded model (greyed until one comes), Custom, then every preset,
    each with its attention type and source as its tooltip."""
    combo = QComboBox()
    combo.setToolTip(
        "Fill the fields from the loaded model's config.json or from a real model (each "
        "preset keeps its source). Editing the model's shape switches to 'Custom'; seq_len, "
        "batch and the KV dtype keep the preset.")
    combo.addItem("Loaded model (none yet)", LOADED)
    set_item_enabled(combo, 0, False)
    combo.addItem("Custom", CUSTOM)
    for p in presets.values():
        combo.addItem(p.name, p.id)
        combo.setItemData(combo.count() - 1, f"{typeset(p.attention_type)}\nsource: {typeset(p.source)}",
                          Qt.ItemDataRole.ToolTipRole)
    return combo


def set_item_enabled(combo: QComboBox, index: int, enabled: bool) -> None:
    item = combo.model().item(index)
    if item is not None:
        item.setEnabled(enabled)


def field_spin(key: str) -> QSpinBox:
    """The spin box of field `key` (FIELDS): its range and tooltip, numbers written '4,096'."""
    _label, tip, lo, hi = FIELDS[key]
    spin = QSpinBox()
    spin.setRange(lo, hi)
    spin.setLocale(QLocale.c())  # "4,096" in every language, as the panel's lines write it
    spin.setGroupSeparatorShown(True)
    spin.setToolTip(tip)
    spin.setKeyboardTracking(True)
    if key == "d_head":
        spin.setSpecialValueText("auto")
    return spin


def dtype_combo() -> QComboBox:
    """The KV dtype: each with its bits, fp16 chosen."""
    combo = QComboBox()
    for name, bits in KV_DTYPE_BITS.items():
        combo.addItem(f"{name} ({bits} bits)", name)
    combo.setCurrentIndex(list(KV_DTYPE_BITS).index("fp16"))
    combo.setToolTip("Data type of the cached keys and values. Quantised caches "
                     "(fp8, int8, int4) are counted without their scales.")
    return combo


def field_values(inp: CalcInputs, spins: dict[str, QSpinBox], dtypes: QComboBox) -> dict:
    """A model's numbers as the fields (`spins`, each value within its range) and the KV dtype
    (`dtypes`: one it offers) show them."""
    n_kv = inp.n_kv_head or inp.n_head
    auto = inp.d_head is None or inp.d_head == default_d_head(inp.d_model, inp.n_head)
    values = {"d_model": inp.d_model, "n_head": inp.n_head, "n_kv_head": n_kv,
              "d_head": 0 if auto else inp.d_head, "n_layer": inp.n_layer,
              "seq_len": inp.seq_len or inp.max_positions or 4096, "batch": inp.batch}
    if inp.mla is not None:  # (no KV heads; d_head from the ranks, not d_model / n_head)
        values.update({key: value for key, (value, _) in mla_fields(inp).items()})
    values = {key: min(max(int(values[key]), spin.minimum()), spin.maximum())
              for key, spin in spins.items()}
    index = max(0, dtypes.findData(inp.kv_dtype))
    return {**values, "kv_dtype": dtypes.itemData(index)}
