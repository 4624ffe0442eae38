"""The kernels' warm-up state as a fresh process has it, for tests that watch a warm-up begin:
every warm-up an earlier test started joined first, then qmatvec's record of what is warm emptied
(the code compiled in this process stays: warming again only calls it)."""

import threading

# the threads that warm kernels: a load's (qmatvec.warm_in_background) and the window's job
# (ui/machinery/loading.py WARM_KIND)
WARMING = ("qmatvec-warm", "attnviz-kernels-warm")


def settled() -> None:
    """Every warm-up an earlier test started has ended (one still running would write into the
    state a test sets afresh)."""
    for t in threading.enumerate():
        if t.name.startswith(WARMING):
            t.join(timeout=600)
            assert not t.is_alive()


def as_fresh(monkeypatch):
    """settled(), then qmatvec's warm-up record emptied for this test (monkeypatch puts it back)
    -> the qmatvec module."""
    from attnviz.engine.computing import qmatvec as qm

    settled()
    monkeypatch.setattr(qm, "_warmed", {})
    monkeypatch.setattr(qm, "_serial_ready", set())
    monkeypatch.setattr(qm, "_ready_types", set())
    monkeypatch.setattr(qm, "_started", set())
    monkeypatch.setattr(qm, "ONE_ROW", None)
    return qm
