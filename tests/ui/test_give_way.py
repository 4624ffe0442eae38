"""Runner.give_way, the pause of a long job on the pool (a template probe, Compare's induction
probe) while a keystroke's run goes first: a job made stale during the pause leaves it at once, and
one thread computes at a time."""

import threading

import pytest

from attnviz.ui.machinery.runner import Runner

WAIT = 20000
HOLD_S = 10  # a held job lets go after this at the latest (the test has failed by then)


def _paused_probe(qtbot, runner, kind):
    """A probe of `kind` paused in giving_way's stop() behind a keystroke's run that holds the pool
    until released. -> (the probe's job id, what it said, the keystroke's release event)."""
    started, k_running, k_release, k_done = (threading.Event() for _ in range(4))
    said = []
    probe = runner.claim(kind)
    stop = runner.giving_way(kind, probe)

    def work():  # a step, then stop() until it says stop
        started.set()
        while not stop():
            k_running.wait(0.001)
        said.append(("stopped", "after the keystroke" if k_done.is_set() else "during it"))
        return "stopped"

    def keystroke():
        k_running.set()
        k_release.wait(HOLD_S)
        k_done.set()
        return "k"
    runner.submit(kind, work, lambda *_: None, job_id=probe)
    qtbot.waitUntil(started.is_set, timeout=WAIT)
    runner.submit("compute", keystroke, lambda *_: None)
    qtbot.waitUntil(k_running.is_set, timeout=WAIT)
    return probe, said, k_release


@pytest.mark.parametrize("made_stale", ["a new probe", "cancelled"])
def test_a_probe_made_stale_while_paused_stops_at_once(qtbot, made_stale):
    """The user picks another probe source (a new probe claimed and submitted), or closes Compare
    (its probe cancelled: "B is freed"): the paused probe stops while the keystroke's run still
    holds the pool, not after it and the new probe have run."""
    runner = Runner()
    _probe, said, k_release = _paused_probe(qtbot, runner, "probe")
    new_ran = []
    try:
        if made_stale == "a new probe":
            new = runner.claim("probe")
            runner.submit("probe", lambda: new_ran.append("new") or "new", lambda *_: None, job_id=new)
        else:
            runner.cancel("probe")
        qtbot.waitUntil(lambda: bool(said), timeout=WAIT)
    finally:
        k_release.set()
    assert said == [("stopped", "during it")] and new_ran == []
    assert runner.wait_idle()
    assert new_ran == (["new"] if made_stale == "a new probe" else [])
    assert runner.pool.maxThreadCount() == 1  # the room it was lent is given back
