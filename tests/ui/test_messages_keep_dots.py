"""A message ends as one sentence without losing a dot of its own: a name or path that ends in
dots ("v1..", a range "1..", an error's "...") keeps them, and a period is added only where the
text ends in no sentence mark."""

from windows import WAIT, open_window, widget


def test_sentence_adds_a_period_only_where_none_ends_the_text():
    from attnviz.ui.views.notices import sentence

    assert [sentence(m) for m in ("open it again", "open it again.", "Why?", "stopped…")] == [
        "open it again.", "open it again.", "Why?", "stopped…"]
    # a dot that belongs to the text stays
    assert sentence("Still showing v1..") == "Still showing v1.."
    assert sentence("it must be in 1..") == "it must be in 1.."


def test_a_failed_load_names_the_model_still_shown_with_every_dot_of_its_name(qtbot, tmp_path):
    from tiny import tiny_text_model

    folder = tiny_text_model(tmp_path / "v1..")
    w = open_window(qtbot, tmp_path / "s.ini", model=str(folder), text="a b c")
    assert w.state.model_name == "v1.."
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{")
    w.load_model(str(broken))
    qtbot.waitUntil(lambda: widget(w, "error_banner").isVisible(), timeout=WAIT)
    msg = widget(w, "error_banner").text()
    assert msg.startswith("Could not load model") and msg.endswith("Still showing v1..")
    w.worker.wait_idle()
