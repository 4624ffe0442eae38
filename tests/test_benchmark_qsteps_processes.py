"""benchmarks/qsteps_processes.py: qsteps' goal figures as the median over fresh processes, each
child's JSON line read back, and qsteps' own in-process figures named apart from them."""

import json
import subprocess
import sys

import pytest

from benchmarks import qsteps, qsteps_processes as qp
from benchmarks.children import ROOT

GOALS = [f"generation step T = {T}{what}" for T in (64, 512) for what in (
    ", as generate takes it", ": as generate takes it / quantised-bytes floor",
    ": as generate takes it, each block beside its reads")]


def child(step_ms: dict, floor: float, block_ratio: float = 1.2, pair: int = 100, load: float = 0.4) -> dict:
    """A child's output as run_children reads it: {T: median step} over `floor`, through JSON."""
    runs = {T: ([ms - 1.0, ms, ms + 3.0], [block_ratio - 0.1, block_ratio, block_ratio + 0.5],
                {"pair": pair, "one": 35}) for T, ms in step_ms.items()}
    line = json.dumps(qp.summary(runs, floor, 8, load))
    return qp.parse_child("numba says something first\n" + line + "\n")


def test_a_child_reports_its_steps_median_over_its_own_floor_per_t():
    got = child({64: 5.0, 512: 6.0}, 2.0, block_ratio=1.3)
    assert got["block"] == 8 and got["load_average"] == 0.4
    s64, s512 = got["steps"][64], got["steps"][512]
    assert (s64["step_ms"], s64["floor_ms"], s64["ratio"]) == (5.0, 2.0, 2.5)
    assert (s512["step_ms"], s512["ratio"]) == (6.0, 3.0)
    assert s64["block_ratio"] == pytest.approx(1.3) and s64["blocks"] == 3
    assert s64["taken"] == {"pair": 100, "one": 35}


@pytest.mark.parametrize("out", [
    "", "not json\n", '{"block": 8, "load_average": 0.1, "steps": {"64": {}}}\n',
    json.dumps(qp.summary({64: ([1.0], [1.0], {"pair": 1})}, 1.0, 8, 0.1)),  # no T = 512
    json.dumps(qp.summary({T: ([1.0], [1.0], {"pair": 1}) for T in qp.TS}, 1.0, 8, 0.1)) + "\nTraceback",
])
def test_output_without_the_figures_on_its_last_line_is_refused(out):
    with pytest.raises(qp.ChildError):
        qp.parse_child(out)


def test_the_goal_figures_are_the_median_over_the_processes_of_each_ones_ratio():
    # each process's ratio: 2.5, 1.2, 1.4; their median 1.4 (the mean 1.7, the medians' ratio 2.0)
    children = [child({64: 5.0, 512: 8.0}, 2.0, 1.1, pair=90), child({64: 3.0, 512: 4.0}, 2.5, 1.5, pair=80),
                child({64: 7.0, 512: 9.0}, 5.0, 1.2, pair=70, load=0.7)]
    figs = {f["name"]: f for f in qp.process_figures(children)}
    assert sorted(figs) == sorted(GOALS)  # (the names benchmarks.report and the README's table read)
    ratio = figs["generation step T = 64: as generate takes it / quantised-bytes floor"]
    assert ratio["value"] == pytest.approx(1.4) and ratio["runs"] == pytest.approx([2.5, 1.2, 1.4])
    assert (ratio["goal"], ratio["met"], ratio["headline"]) == (1.3, False, True)
    assert "the median over 3 processes, each a fresh one" in ratio["note"]
    assert "2.500x (floor 2.00 ms), 1.200x (floor 2.50 ms), 1.400x (floor 5.00 ms)" in ratio["note"]
    assert "3 blocks of 8 steps in a row at T = 64..71" in ratio["note"]
    at512 = figs["generation step T = 512: as generate takes it / quantised-bytes floor"]
    assert at512["value"] == pytest.approx(1.8) and at512["headline"] is False and at512["goal"] == 1.3
    step = figs["generation step T = 64, as generate takes it"]
    assert step["value"] == 5.0 and step["runs"] == [5.0, 3.0, 7.0] and step["goal"] is None
    assert "the pair in 240 of 345 calls" in step["note"] and step["note"].endswith("load average at each process's end 0.4, 0.4, 0.7")
    blocks = figs["generation step T = 64: as generate takes it, each block beside its reads"]
    assert blocks["value"] == pytest.approx(1.2) and blocks["runs"] == pytest.approx([1.1, 1.5, 1.2])


def test_the_main_processs_own_figures_are_named_apart_from_the_goals_and_have_none():
    args = (64, [4.0, 5.0], [1.1, 1.3], {"pair": 3, "one": 1}, 2.0, 0.2)
    assert [f["name"] for f in qsteps._as_generate_figures(*args)][:2] == GOALS[:2]
    own = qsteps._as_generate_figures(*args, goal=False)
    assert [f["name"] for f in own] == [name + ", in the main process" for name in GOALS[:3]]
    assert all(f["goal"] is None and not f["headline"] for f in own)


def test_the_children_run_one_after_another_each_a_fresh_process_of_this_checkout(monkeypatch):
    calls = []
    out = json.dumps(qp.summary({T: ([4.0], [1.2], {"pair": 9, "one": 0}) for T in qp.TS}, 2.0, 8, 0.1))

    def run(argv, **kw):
        calls.append((argv, kw))
        return subprocess.CompletedProcess(argv, 0, stdout=out + "\n", stderr="")
    monkeypatch.setattr(subprocess, "run", run)
    got = qp.run_children(2, 7, 1)
    assert [c["steps"][64]["ratio"] for c in got] == [2.0, 2.0]
    assert [argv for argv, _ in calls] == [[sys.executable, "-m", "benchmarks.qsteps_child",
                                           "--repeat", "7", "--threads", "1"]] * 2
    assert all(kw["env"]["PYTHONPATH"].split(":")[0] == str(ROOT) and kw["cwd"] == ROOT for _, kw in calls)

    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(
        argv, 1, stdout="", stderr="MemoryError"))
    with pytest.raises(qp.ChildError, match="process 1 of 2 exited 1: MemoryError"):
        qp.run_children(2, 7, 1)
