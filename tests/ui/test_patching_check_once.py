"""The Patching panel's check tokenises the clean text once: its labels are the tokenizer's own
(no second pass from the ids), and editing the corrupted text checks it against the clean text
already tokenised."""

from attnviz.engine.analysing.patching import propose_corrupt
from windows import IOI, WAIT

LONGER = "When Mary and John went to the big store, John gave a drink to"


def test_the_check_tokenises_the_clean_text_once(qtbot, patching_window, monkeypatch):
    w = patching_window
    p = w.patching_panel
    qtbot.waitUntil(lambda: p.position_label.text().startswith("P = "), timeout=WAIT)  # checked
    w.worker.wait_idle()
    m = w.state.model
    corrupt = propose_corrupt(m, IOI).text  # (of the clean text's length)
    n_longer, n_longest = len(m.encode(LONGER)[0]), len(m.encode(LONGER + " now")[0])
    assert len({len(m.encode(IOI)[0]), n_longer, n_longest}) == 3
    tok = m.tokenizer  # every text it encodes and id list it labels from here on
    encoded, labelled = [], []
    encode, labels_for_ids = tok.encode, tok.labels_for_ids
    monkeypatch.setattr(tok, "encode", lambda text, *a, **k: (encoded.append(text), encode(text, *a, **k))[1])
    monkeypatch.setattr(tok, "labels_for_ids", lambda ids: (labelled.append(ids), labels_for_ids(ids))[1])
    p.corrupt_box.setText(LONGER)  # each edit is checked against the clean text
    qtbot.waitUntil(lambda: f"the corrupted text {n_longer}:" in p.note.text(), timeout=WAIT)
    p.corrupt_box.setText(corrupt)
    qtbot.waitUntil(lambda: p.aligned.text() == "" and p.note.text() == "", timeout=WAIT)
    p.corrupt_box.setText(LONGER + " now")
    qtbot.waitUntil(lambda: f"the corrupted text {n_longest}:" in p.note.text(), timeout=WAIT)
    w.worker.wait_idle()
    assert LONGER in encoded and corrupt in encoded  # (the checks ran)
    assert IOI not in encoded and labelled == [], (encoded, labelled)
    assert p.position_label.text().startswith("P = ")  # the clean token at P still named
