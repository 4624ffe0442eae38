"""The Calculator's comparison table writes a size one way whatever the bytes behind it: Gemma 2
9B's MQA cache is 168 MiB at 4,096 tokens and 168.04 MiB at 4,097 (its window layers stop growing
at 4,096), and both rows read "168 MiB", never "168.0 MiB" beside "168 MiB"; a size with a decimal
to write keeps it."""

from attnviz.engine.calc import format_bytes


def _rows(panel) -> dict:
    t = panel.compare_table
    return {t.item(r, 0).text(): [t.item(r, c).text() for c in range(1, t.columnCount())]
            for r in range(t.rowCount())}


def test_a_size_just_over_a_whole_number_reads_as_that_number(calc_panel):
    calc_panel.preset_combo.setCurrentIndex(calc_panel.preset_combo.findData("gemma-2-9b"))
    totals = {}
    for T in (4096, 4097):
        calc_panel.spins["seq_len"].setValue(T)
        rows = _rows(calc_panel)
        mqa = next(v for k, v in rows.items() if k.startswith("MQA"))
        totals[T] = mqa[2]
        assert not any(cell.endswith((".0 KiB", ".0 MiB", ".0 GiB", ".0 TiB")) for v in rows.values()
                       for cell in v), rows
    assert calc_panel.result.compare["mqa"].kv_bytes_total != 168 << 20  # (4,097: not 168 MiB exactly)
    assert totals == {4096: "168 MiB", 4097: "168 MiB"}, totals
    assert format_bytes(int(168.4 * 2**20)) == "168.4 MiB" and format_bytes(1152) == "1.12 KiB"
