"""benchmarks/cold_start.py's window case: its process ends on What heads do's first prediction
painted, after the milestones that lead to it, and --cases refuses what it does not know."""

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.cold_start_heads import CPU_KEY, heads_process

ROOT = Path(__file__).resolve().parents[1]


def test_the_heads_case_ends_when_the_first_prediction_is_painted():
    seconds, marks = heads_process("attnviz-toy-stdlib", timeout=120)
    assert seconds == marks["prediction painted"] > 0
    assert 0 < marks.pop(CPU_KEY)  # the process's CPU seconds at the paint
    order = ["imports (Qt, attnviz.ui.app)", "window built (the model loading meanwhile)",
             "first grid result", "prediction painted"]
    assert [marks[k] for k in order] == sorted(marks[k] for k in order)
    # What heads do is built when the process first asks for it (ui/panel_docks.py), which may come
    # before or after the first grid result: only after the window and before its paint
    built = marks["panels built"]
    assert marks["window built (the model loading meanwhile)"] <= built <= marks["prediction painted"]
    assert marks["model loaded"] <= marks["first grid result"]
    assert marks["prediction computed"] <= marks["prediction painted"]


def test_cases_lists_what_it_measures_and_refuses_an_unknown_one():
    run = [sys.executable, "-m", "benchmarks.cold_start"]
    shown = subprocess.run([*run, "--help"], capture_output=True, text=True, cwd=ROOT)
    assert shown.returncode == 0 and "--cases" in shown.stdout and "heads" in shown.stdout
    refused = subprocess.run([*run, "--cases", "heads,launch"], capture_output=True, text=True, cwd=ROOT)
    assert refused.returncode == 2
    assert "--cases: launch; choose from predict, generate, heads" in refused.stderr


def test_the_heads_case_alternates_with_the_baseline_run_for_run(monkeypatch, tmp_path):
    """--baseline: each of this code's window runs follows one of the baseline's, and the
    baseline's median, milestones and CPU seconds are recorded beside this code's (the processes
    replaced by stand-ins)."""
    import benchmarks.cold_start as C

    calls = []

    def fake(model, timeout=120.0, root=C._ROOT):
        calls.append(root)
        t = 2.0 if root == C._ROOT else 3.0
        return t, {"model loaded": t / 2, "prediction painted": t, CPU_KEY: t + 1}
    written = {}
    monkeypatch.setattr(C, "heads_process", fake)
    monkeypatch.setattr(C.record, "write", lambda name, figures, **kw: written.update(f=figures, **kw))
    monkeypatch.setattr(C, "find_gemma", lambda: None)
    monkeypatch.setattr(sys, "argv", ["cold_start", "--cases", "heads", "--heads-runs", "2",
                                      "--baseline", str(tmp_path)])
    assert C.main() == 0
    base = str(tmp_path)
    assert calls == [C._ROOT, base, base, C._ROOT, base, C._ROOT]  # a first run each for the page cache
    figures = {f["name"]: f for f in written["f"]}
    smol = "What heads do, first result in the window, SmolLM2, warm cache"
    assert figures[smol]["value"] == 2.0
    (baseline,) = [f for name, f in figures.items() if name.startswith(smol + ", baseline")]
    assert baseline["value"] == 3.0 and baseline["runs"] == [3.0, 3.0]
    cpu = {name: f["value"] for name, f in figures.items() if name.endswith("CPU seconds to the paint")}
    assert sorted(cpu.values()) == [3.0, 4.0] and len(cpu) == 2
    heads = written["details"]["profiles"]["What heads do, milestones (s since the spawn)"]
    assert heads["SmolLM2"] == {"model loaded": 1.0, "prediction painted": 2.0}
    (base_marks,) = [v for k, v in heads.items() if k.startswith("SmolLM2, baseline")]
    assert base_marks == {"model loaded": 1.5, "prediction painted": 3.0}


def test_each_timed_run_records_its_own_cpu_seconds_and_page_faults():
    """timed_process's usage: one entry per process, its own (not the runs' before it): CPU
    seconds within the run's wall time and the page faults a Python start takes."""
    from benchmarks.cold_start import describe_usage, memory_map, timed_process

    usage = []
    walls = [timed_process(["--help"], usage=usage) for _ in range(2)]
    assert len(usage) == 2
    for wall, u in zip(walls, usage):
        assert 0 < u["user_s"] + u["sys_s"] <= (os.cpu_count() or 1) * wall + 0.05
        assert u["minor_faults"] > 100 and u["major_faults"] >= 0
    assert describe_usage(usage).startswith("user ") and "minor faults" in describe_usage(usage)
    assert set(memory_map()) <= {"page_reporting_order", "virtio_balloon_free_page_reporting",
                                 "damon_schemes"}


def test_gap_pauses_before_each_timed_command_run(monkeypatch):
    """--gap SECONDS: a pause before each timed run (not before the untimed first one), recorded
    in the result beside each run's usage (the processes replaced by stand-ins)."""
    import benchmarks.cold_start as C

    events = []

    def fake(argv, root=C._ROOT, env=None, usage=None):
        events.append("run")
        if usage is not None:
            usage.append({"user_s": 1.0, "sys_s": 0.5, "minor_faults": 1000, "major_faults": 0})
        return 1.5
    written = {}
    monkeypatch.setattr(C, "timed_process", fake)
    monkeypatch.setattr(C.time, "sleep", lambda s: events.append(f"sleep {s:g}"))
    monkeypatch.setattr(C.record, "write", lambda name, figures, details=None: written.update(
        figures=figures, details=details))
    monkeypatch.setattr(C, "find_gemma", lambda: None)
    monkeypatch.setattr(sys, "argv", ["cold_start", "--cases", "predict", "--runs", "2", "--gap", "3",
                                      "--no-cold", "--no-profile"])
    assert C.main() == 0
    assert events == ["run", "sleep 3", "run", "sleep 3", "run"]
    details = written["details"]
    assert details["gap_before_each_run_s"] == 3.0
    assert len(details["usage_per_run"]["predict, SmolLM2, warm cache"]) == 2
    (warm,) = [f for f in written["figures"] if f["name"] == "predict, SmolLM2, warm cache"]
    assert warm["value"] == 1.5 and "3 s apart" in warm["note"]


def test_the_phases_by_the_clock_add_up_to_the_whole_run():
    """phase_times: a SmolLM2 prediction's phases (the vocabulary built from its GGUF, its layers
    dequantised, the forward pass, the unembedding's products) add up to the run's own time."""
    from benchmarks.cold_start import SMOLLM2, argv_of, describe_phases, phase_times

    found = phase_times(argv_of("predict", SMOLLM2))
    phases = found["phases_s"]
    assert abs(sum(phases.values()) - found["total_s"]) < 0.01  # (each rounded to 1 ms)
    for name in ("imports and start-up", "vocabulary (tokenizer built)", "layers: dequantise to float32",
                 "first forward pass", "unembedding: products", "rest (the command's own work, output)"):
        assert phases[name] > 0, name
    assert found["user_s"] > 0 and found["minor_faults"] > 0
    assert describe_phases(found).startswith(f"{found['total_s']:.2f} s (user ")


def test_both_checkouts_are_byte_compiled_before_anything_is_timed(monkeypatch, tmp_path):
    """No timed run compiles a module (PYTHONDONTWRITEBYTECODE, a fresh checkout): this code and
    the baseline's are byte-compiled first."""
    import compileall

    import benchmarks.cold_start as C

    seen = []
    monkeypatch.setattr(compileall, "compile_dir", lambda path, **kw: seen.append(path))
    monkeypatch.setattr(C, "heads_process", lambda *a, **k: seen.append("timed") or (1.0, {"prediction painted": 1.0}))
    monkeypatch.setattr(C.record, "write", lambda *a, **kw: "x")
    monkeypatch.setattr(C, "find_gemma", lambda: None)
    monkeypatch.setattr(sys, "argv", ["cold_start", "--cases", "heads", "--heads-runs", "1",
                                      "--baseline", str(tmp_path)])
    assert C.main() == 0
    assert seen[:2] == [str(Path(C._ROOT) / "attnviz"), str(tmp_path / "attnviz")] and "timed" in seen[2:]
