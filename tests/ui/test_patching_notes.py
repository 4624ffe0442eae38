"""The Patching tab's refusal lines, as shown, on the toy decoder: two texts of the same tokens are
refused at Run as that (not as two equal diffs, which no position, target or alt can fix); a
refusal's line goes once a box it spoke of changes, and the length check says its own line again
where that still holds."""

from windows import IOI, WAIT


def test_the_same_tokens_twice_are_refused_as_that_at_run(qtbot, patching_window):
    w = patching_window
    p = w.patching_panel
    T = len(w.state.model.encode(IOI)[0])
    p.corrupt_box.setText(IOI)
    assert not p.run()  # refused before any run, on the spot
    assert not w.patch_jobs.running and w.patch_jobs.result is None
    assert p.note.isVisible()
    assert p.note.text() == (f"the clean and corrupted texts are the same {T} tokens: patching needs a "
                             "corrupted text that differs from the clean one, for example in one name, "
                             "with the same number of tokens")
    assert not p.aligned.isVisible()  # (nothing to align)


def test_a_position_before_the_first_difference_is_refused_as_that_at_run(qtbot, patching_window):
    w = patching_window
    p = w.patching_panel
    p.propose()  # (the second "John" swapped: the texts agree up to it)
    ids_c, ids_d = (w.state.model.encode(t)[0] for t in (IOI, p.corrupt_box.text()))
    first = int((ids_c != ids_d).argmax())
    p.position_box.setValue(first - 1)
    assert not p.run()  # refused before any run, on the spot
    assert not w.patch_jobs.running and w.patch_jobs.result is None
    assert p.note.isVisible()
    assert p.note.text().startswith(f"the clean and corrupted texts first differ at token {first} ")
    assert (f"after position {first - 1}: under the causal mask position {first - 1} sees no later token"
            in p.note.text()), p.note.text()
    assert p.note.text().endswith(f"pick a position from {first} to {len(ids_c) - 1}")


def test_a_refusal_goes_once_a_box_it_spoke_of_changes(qtbot, patching_window):
    w = patching_window
    p = w.patching_panel
    p.propose()  # (a corrupted text of the same length)
    p.target_edit.setText("#7")
    p.alt_edit.setText("#7")
    assert p.run()
    qtbot.waitUntil(lambda: not w.patch_jobs.running and p.note.isVisible(), timeout=WAIT)
    assert p.note.text().startswith("target and alt are the same token (7)"), p.note.text()
    p.position_box.setValue(3)  # untouched by a new Run, the line stays only while it holds
    assert not p.note.isVisible() and p.note.text() == ""
    p.alt_edit.setText("")
    assert not p.note.isVisible()


def test_a_length_refusal_goes_with_its_boxes_and_the_check_says_it_again(qtbot, patching_window):
    w = patching_window
    p = w.patching_panel
    p.corrupt_box.setText(IOI + " and")
    qtbot.waitUntil(lambda: p.note.text().startswith("the clean text is "), timeout=WAIT)
    assert not p.run()
    said = p.note.text()
    assert said.startswith("the clean text is ") and p.aligned.isVisible()
    p.position_box.setValue(2)  # (the lengths still differ: the check's line is back)
    qtbot.waitUntil(lambda: p.note.isVisible() and p.note.text() == said, timeout=WAIT)
    p.propose()
    qtbot.waitUntil(lambda: not p.note.isVisible() and not p.aligned.isVisible(), timeout=WAIT)


def test_a_text_over_the_models_positions_is_told_only_to_be_shortened(qtbot, patching_window):
    """The tab has no truncate control and the window no command line: its line says what can be
    done here, never --truncate."""
    w = patching_window
    p = w.patching_panel
    w.state.set_text("the " * 200)
    p.corrupt_box.setText("a " + "the " * 199)
    assert not p.run()
    assert p.note.isVisible()
    assert p.note.text().endswith(f"longer than this model's {w.state.model.config.max_positions} "
                                  "positions: shorten the text"), p.note.text()
    assert "truncate" not in p.note.text()
