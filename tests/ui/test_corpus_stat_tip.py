"""The Corpus panel's statistic box says how many texts the shown statistic's means are over: all
the scanned texts, or for duplicate and induction the fewer that were not mostly unknown tokens
(store.fewer_texts, as scan-report's figure notes them)."""

from windows import WAIT

TEXTS = ["the cat sat on the mat", "qzx vbn plk wrt", "zebra xylophone quartz"]


def test_the_statistic_tooltip_names_the_texts_its_means_are_over(window, qtbot, tmp_path):
    from attnviz.corpus.scan import scan

    (tmp_path / "c.txt").write_text("\n".join(TEXTS) + "\n")
    scan(tmp_path / "out", "attnviz-textbook", tmp_path / "c.txt", batch=2, examples=2, in_process=True,
         progress_stream=open("/dev/null", "w"))
    window.open_scan(str(tmp_path / "out"))
    panel = window.corpus_panel
    qtbot.waitUntil(lambda: panel.scan is not None, timeout=WAIT)
    assert panel.scan.n_scanned == 3
    for name, over in (("previous", "over the 3 scanned texts"), ("entropy", "over the 3 scanned texts"),
                       ("duplicate", "over 1 text of the 3 scanned"), ("induction", "over 1 text of the 3 scanned")):
        panel.set_stat(name)
        tip = panel.stat_box.toolTip()
        assert f"its mean {over}" in tip, (name, tip)
        assert ("unknown tokens" in tip) == (name in ("duplicate", "induction")), tip
