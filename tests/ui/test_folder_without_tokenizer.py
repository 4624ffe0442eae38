"""A model folder without tokenizer.json opens and takes typed token ids: the window says so from the
moment it is loaded (the model's notice), as for a GGUF without a tokenizer, not only once a text
has failed."""

from tiny import FIXTURES
from windows import WAIT, wait_for_text, widget


def test_a_folder_without_tokenizer_says_to_type_ids_as_soon_as_it_is_loaded(window, qtbot):
    assert not widget(window, "model_notice").isVisible()  # MiniLM has its tokenizer
    window.load_model(str(FIXTURES / "bert"))
    qtbot.waitUntil(lambda: window.state.model_name == "bert", timeout=WAIT)
    notice = widget(window, "model_notice")
    assert notice.isVisible()
    assert notice.text() == "bert: its folder has no tokenizer.json: type token ids instead, e.g. 5, 17, 3."
    window.set_text("5, 17, 3")
    wait_for_text(qtbot, window, "5, 17, 3")
    assert window.state.result.input_ids.tolist() == [5, 17, 3]
    assert notice.isVisible()  # it stays while the model is shown


def test_the_guide_says_no_head_is_named_when_the_sample_cannot_be_computed(window, qtbot):
    from attnviz.engine.analysing.samples import SAMPLES

    window.set_text(SAMPLES[0].text)
    answer = window.guide_bar.answer
    qtbot.waitUntil(lambda: window.guide_bar.show_button.isEnabled(), timeout=WAIT)  # found on MiniLM
    window.load_model(str(FIXTURES / "bert"))  # no tokenizer: the sample's text cannot be run
    qtbot.waitUntil(lambda: widget(window, "error_banner").isVisible(), timeout=WAIT)
    qtbot.waitUntil(lambda: "No head is named" in answer.text(), timeout=WAIT)
    assert "could not compute the sample" in answer.text() and "Finding" not in answer.text()
    assert not window.guide_bar.show_button.isEnabled()
