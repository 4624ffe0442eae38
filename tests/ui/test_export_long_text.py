"""File -> Export while a long text is shown: its patterns are never held whole, and the dialog
says so (with the long view's own export, and the command that writes a block of them) instead of "no attention has been
computed", which the long view on screen belies."""

from attnviz.engine.computing.longdoc import dense_bytes
from attnviz.ui.export import ExportDialog
from windows import WAIT


def test_the_dialog_says_why_a_long_text_exports_nothing(window, qtbot):
    st = window.state
    cfg = st.model.config
    window.worker.long_jobs.dense_limit = dense_bytes(cfg.n_layer, cfg.n_head, 40)  # over 40 tokens: long
    window.set_text("The cat sat on the mat. " * 12)
    qtbot.waitUntil(lambda: st.long.run is not None, timeout=WAIT)
    T = st.long.run.patterns.T
    dlg = ExportDialog(st, window, window.settings)
    assert not dlg.export_button.isEnabled()
    assert dlg.error.text() == (f"The text is long ({T} tokens): its patterns are computed only for what "
                                "the long view shows, never whole, so there is nothing to export here. "
                                "The long view's Export picture… writes it as shown; attnviz attention "
                                "--layer L --rows A:B writes a layer's block of query rows.")
    window.worker.wait_idle()
