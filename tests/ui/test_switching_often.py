"""The whole vocabulary's build runs at a short switch interval (ui/machinery/loading.py
switching_often) and puts the process's interval back after, whatever the short one rounds to as
the interpreter stores it (whole microseconds), unless someone set another meanwhile."""

import sys

import pytest

from attnviz.ui.machinery import loading as L


@pytest.fixture
def interval():
    old = sys.getswitchinterval()
    yield old
    sys.setswitchinterval(old)


@pytest.mark.parametrize("quick", [0.0005, 0.0001, 0.0003])  # (0.0001 and 0.0003 do not read back equal)
def test_the_interval_is_put_back_after_the_build(interval, monkeypatch, quick):
    sys.setswitchinterval(0.005)
    monkeypatch.setattr(L, "QUICK_SWITCH_S", quick)
    with L.switching_often():
        assert sys.getswitchinterval() == pytest.approx(quick, abs=1e-6)
    assert sys.getswitchinterval() == 0.005


def test_an_interval_set_meanwhile_is_left_as_set(interval):
    sys.setswitchinterval(0.005)
    with L.switching_often():
        sys.setswitchinterval(0.002)
    assert sys.getswitchinterval() == 0.002
