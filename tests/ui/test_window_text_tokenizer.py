"""A window on a GGUF model with a SentencePiece vocabulary: its load builds the tokenizer for the
text the window opens with (ui/machinery/loading.py), so the first result does not wait for the
whole vocabulary; the whole one is built on a thread of its own after the first analysis, and every
text, the first and the ones typed after, gets the tokens the whole vocabulary gives."""

import sys
import threading
from pathlib import Path


from attnviz.engine import load_model
from attnviz.engine.analysing.heads import unknown_token_ids
from attnviz.ui.machinery import loading as W
from windows import WAIT, open_window, wait_for_text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import spm_model  # noqa: E402

TEXT = "The keys to the cabinet are on the table."
TYPED = TEXT + " Zebras quietly graze."


def test_the_window_loads_a_tokenizer_for_its_text_and_makes_it_whole_after_the_first_analysis(
        qtbot, tmp_path, monkeypatch):
    path = spm_model(tmp_path / "spm.gguf")
    whole = load_model(path)  # the tokenizer for every text, built at load
    assert whole.tokenizer.for_every_text
    gate, built = threading.Event(), []
    real = W.complete_vocabulary

    def held(model):
        assert gate.wait(WAIT / 1000)
        real(model)
        built.append(model)
    monkeypatch.setattr(W, "complete_vocabulary", held)
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(path), text=TEXT, panels=("predict",))
        st, eff = w.state, w.state.effects
        model = st.model
        assert not model.tokenizer.for_every_text  # built for the window's first text
        assert st.result.input_ids.tolist() == whole.tokenizer.encode(TEXT).ids
        assert list(st.result.labels) == whole.tokenizer.encode(TEXT).labels
        qtbot.waitUntil(lambda: eff.analysis is not None, timeout=WAIT)
        qtbot.waitUntil(lambda: w.worker.running(W.VOCABULARY_KIND) is not None,  # after the analysis
                        timeout=WAIT)
        assert not model.tokenizer.for_every_text  # (the first head scores did not build it either)
        assert unknown_token_ids(model) == unknown_token_ids(whole) == {whole.tokenizer.token_to_id("<unk>")}
        assert not model.tokenizer.for_every_text
        a = eff.analysis
        assert [a.label(i) for i in a.clean.top_ids] == [whole.tokenizer.labels_for_ids([int(i)])[1][0]
                                                         for i in a.clean.top_ids]
    finally:
        gate.set()
    w.worker.wait_idle()
    assert built == [model] and model.tokenizer.for_every_text  # whole now, on its own thread
    w.set_text(TYPED)
    wait_for_text(qtbot, w, TYPED)
    assert st.result.input_ids.tolist() == whole.tokenizer.encode(TYPED).ids
    w.worker.wait_idle()
    assert built == [model] and w.worker.running(W.VOCABULARY_KIND) is None  # once a model


def test_a_key_typed_while_the_whole_vocabulary_is_built_does_not_wait_for_it(qtbot, tmp_path,
                                                                              monkeypatch):
    """The whole vocabulary's build (the worker's job, after the first analysis) is held while a
    key is typed: the key's text is tokenized (a tokenizer built for it) and painted meanwhile,
    with the tokens and labels the whole vocabulary gives; the build then ends and is used."""
    from PySide6.QtGui import QTextCursor

    from attnviz.engine.reading import gguf_vocab as V

    path = spm_model(tmp_path / "spm.gguf")
    whole = load_model(path)
    entered, gate = threading.Event(), threading.Event()
    real = V.sentencepiece_bpe

    def held(*a, **k):
        interval.append(sys.getswitchinterval())
        entered.set()
        assert gate.wait(2 * WAIT / 1000)
        return real(*a, **k)
    monkeypatch.setattr(V, "sentencepiece_bpe", held)
    default, interval = sys.getswitchinterval(), []
    try:
        w = open_window(qtbot, tmp_path / "s.ini", model=str(path), text=TEXT, panels=("predict",))
        st = w.state
        qtbot.waitUntil(entered.is_set, timeout=WAIT)  # the worker's build has begun, and is held
        w.text_box.moveCursor(QTextCursor.MoveOperation.End)
        qtbot.keyClick(w.text_box, "Z")
        qtbot.waitUntil(lambda: st.result.text == TEXT + "Z" and w.grid.drawn is st.result,  # painted
                        timeout=WAIT)
        want = whole.tokenizer.encode(TEXT + "Z")
        assert st.result.input_ids.tolist() == want.ids and list(st.result.labels) == want.labels
        assert not st.model.tokenizer.for_every_text and w.worker.running(W.VOCABULARY_KIND) is not None
    finally:
        gate.set()
    w.worker.wait_idle()
    assert st.model.tokenizer.for_every_text  # the worker's build, kept
    # (switching threads often meanwhile: the painting and the run waited less for the GIL)
    assert interval == [W.QUICK_SWITCH_S] < [default] and sys.getswitchinterval() == default
    w.set_text(TYPED)
    wait_for_text(qtbot, w, TYPED)
    assert st.result.input_ids.tolist() == whole.tokenizer.encode(TYPED).ids
