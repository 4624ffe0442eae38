"""benchmarks/budget.py writes its sizes with the app's one byte formatter: what the file needs
rounded up, the disk space free and the RSS goal (limits) rounded down."""

from benchmarks.budget import budget_lines, no_room

from attnviz.engine.reading.byte_sizes import format_bytes

GIB = 1 << 30


def test_the_disk_refusal_rounds_the_space_free_down_and_what_the_file_needs_up():
    free, need = 2 * GIB - 1, GIB + 1  # (one decimal each way would read 2.0 and 1.0 GiB)
    assert no_room("/scratch", free, need) == ("not enough disk space in /scratch: 1.99 GiB free, the file "
                                               "needs 1.01 GiB (and 1 GiB to spare)")


def test_a_budget_row_and_its_line_write_sizes_as_the_app_does():
    r = dict(load_s=1.0, first_run_s=2.0, first_heatmaps_s=3.0, window_first_heatmaps_s=3.5, keystroke_s=0.1,
             kept=4, n_layer=28, VmHWM=3 * GIB + GIB // 3, load_average=[0.5, 0.7], memory="(memory line)",
             rss_after_first=2 * GIB, RssAnon=700 << 20, RssFile=GIB + (GIB // 2), expansions=9)
    goal = 4 * GIB - 1
    row, detail = budget_lines("2G", r, goal)
    assert format_bytes(r["VmHWM"]) == "3.33 GiB"
    assert row.endswith(" 3.33 GiB  3.99 GiB  yes"), row  # (the goal, 4 GiB less a byte, never reads 4)
    assert "RSS after the first run 2 GiB (anonymous 700 MiB, file 1.5 GiB at the end)" in detail, detail
    row, _ = budget_lines("auto", r, None)
    assert row.endswith(" 3.33 GiB" + " " * 12), row
