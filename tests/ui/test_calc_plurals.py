"""The Calculator writes one token as "1 token" and a batch of a thousand as "1,000", as it writes
every other count (never "1 tokens × batch 1", "reading 1 tokens" or "batch 1000")."""

from PySide6.QtGui import QTextDocument


def plain(rich: str) -> str:
    doc = QTextDocument()
    doc.setHtml(rich)
    return doc.toPlainText()


def test_one_token_is_singular(calc_panel):
    calc_panel.spins["seq_len"].setValue(1)
    kv, flops = plain(calc_panel.kv_label.text()), plain(calc_panel.flops_label.text())
    assert "1 token × batch 1: " in kv and "1 tokens" not in kv, kv
    assert "one new token reading 1 token, all 32 layers" in flops and "1 tokens" not in flops, flops
    assert calc_panel.compare_table.horizontalHeaderItem(3).text() == "at 1\ntoken\n× batch 1"


def test_a_large_batch_has_its_thousands_separator(calc_panel):
    calc_panel.spins["batch"].setValue(1000)
    calc_panel.set_seq_len(12)
    assert "4,096 tokens × batch 1,000: " in plain(calc_panel.kv_label.text())
    assert calc_panel.compare_table.horizontalHeaderItem(3).text() == "at 4,096\ntokens\n× batch\n1,000"
    assert calc_panel.plot.getPlotItem().getAxis("left").labelText.startswith("KV cache of batch 1,000 (")
    assert plain(calc_panel.sentence_label.text()).endswith("of KV cache (batch 1,000)")


def test_the_notes_write_their_counts_with_separators(calc_panel):
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData("gemma-2-9b"))
    calc_panel.spins["seq_len"].setValue(16_384)
    notes = calc_panel.notes_label.text()
    assert "seq_len 16,384 is longer than the model's 8,192 positions." in notes, notes
    assert "21 of 42 layers keep only the last 4,096 tokens." in notes, notes


def test_one_layer_is_singular(calc_panel):
    """A model of one full layer and two window layers, and of one layer: "the 1 full layer",
    "attention, 1 layer", "(… of 1 layer …), 1 layer, W_O included" (never "1 layers")."""
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData("gemma-2-9b"))
    calc_panel.spins["n_layer"].setValue(3)
    calc_panel.spins["seq_len"].setValue(8192)
    kv = plain(calc_panel.kv_label.text())
    assert " on the 1 full layer + " in kv and " on the 2 window layers" in kv, kv
    calc_panel.spins["n_layer"].setValue(1)
    params, flops = plain(calc_panel.params_label.text()), plain(calc_panel.flops_label.text())
    assert "attention, 1 layer: " in params, params
    assert "1 layers" not in params + flops + plain(calc_panel.kv_label.text()), (params, flops)
    assert ", 1 layer, W_O included" in flops, flops
