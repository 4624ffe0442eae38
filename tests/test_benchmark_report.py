"""benchmarks/record.py and benchmarks/report.py: results as data, rendered as tables."""

import json

import pytest

from benchmarks import record, report

MACHINE = {"cpu": "Test CPU", "cores": 2, "python": "3.11", "numpy": "2", "blas": "openblas 0.3",
           "blas_threads": 2, "platform": "Linux", "load_average": 0.5}
WHERE = {"machine": MACHINE, "commit": "abc1234", "dirty": False, "date": "2026-12-01",
         "command": "python -m benchmarks.fake"}


def results(folder):
    record.write("typing_latency", [
        record.figure("keystroke p95", 17.2, "ms", runs=[17.2, 15.0, 16.1], goal=16.0, headline=True),
        record.figure("stall", 7.0, "ms", runs=[4.4, 7.0], n_runs=11, goal=16.0),
    ], folder=folder, measured=WHERE)
    record.write("scan", [
        record.figure("2 workers against 1", 1.9, "x", goal=1.8, goal_is="min", headline=True),
        record.figure("plain against 1", 1.95, "x"),
    ], folder=folder, measured={**WHERE, "commit": "def5678"})


def test_figure_says_met_by_the_side_of_its_goal():
    assert record.figure("a", 17.2, "ms", goal=16.0)["met"] is False
    assert record.figure("a", 16.0, "ms", goal=16.0)["met"] is True
    assert record.figure("a", 1.79, "x", goal=1.8, goal_is="min")["met"] is False
    assert record.figure("a", 1.8, "x", goal=1.8, goal_is="min")["met"] is True
    assert record.figure("a", 3.0, "ms")["met"] is None
    absent = record.figure("a", None, "ms", goal=16.0)  # not measured: no value, no runs, no verdict
    assert (absent["value"], absent["runs"], absent["met"]) == (None, [], None)
    with pytest.raises(ValueError):
        record.figure("a", 1.0, "ms", goal=1.0, goal_is="less")


def test_the_report_renders_every_figure_with_goal_spread_machine_commit_and_met(tmp_path):
    results(tmp_path / "results")
    docs = report.load(tmp_path / "results")
    page = report.render_doc(docs)
    assert page == report.render_doc(report.load(tmp_path / "results"))  # the same files, the same page
    lines = {line.split(" | ")[0].lstrip("| "): line for line in page.splitlines() if line.startswith("| ")}
    typing = lines["keystroke p95 (`typing_latency`)"]
    assert "| ≤ 16 ms | 17.2 ms | 15–17.2 ms (3 runs) |" in typing
    assert "Test CPU, 2 cores, openblas 0.3 (2 threads), load 0.5" in typing
    assert "abc1234, 2026-12-01" in typing
    assert typing.endswith("| **not met** |")
    stall = lines["stall (`typing_latency`)"]
    assert stall.endswith("| met |") and "4.4–7 ms (11 runs)" in stall
    scan = lines["2 workers against 1 (`scan`)"]
    assert "| ≥ 1.8x | 1.9x | 1 run |" in scan and "def5678" in scan and scan.endswith("| met |")
    assert lines["plain against 1 (`scan`)"].endswith("| — | 1.95x | 1 run | Test CPU, 2 cores, openblas "
                                                       "0.3 (2 threads), load 0.5 | def5678, 2026-12-01 | — |")
    # rows in file order (scan.json before typing_latency.json), figures in their file's order
    names = [n for n in lines if n != "figure"]
    assert names == ["2 workers against 1 (`scan`)", "plain against 1 (`scan`)",
                     "keystroke p95 (`typing_latency`)", "stall (`typing_latency`)"]


def test_met_is_read_from_value_and_goal_not_from_the_file(tmp_path):
    folder = tmp_path / "results"
    record.write("x", [record.figure("f", 20.0, "ms", goal=16.0)], folder=folder, measured=WHERE)
    doc = json.loads((folder / "x.json").read_text())
    doc["figures"][0]["met"] = True  # a file that claims a goal it misses
    (folder / "x.json").write_text(json.dumps(doc))
    assert report.render_doc(report.load(folder)).splitlines()[-1].endswith("| **not met** |")


def test_the_readme_summary_is_rewritten_between_its_markers_in_place(tmp_path):
    results(tmp_path / "results")
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\nbefore\n\n{report.BEGIN}\nold table\n{report.END}\n\nafter\n")
    doc = tmp_path / "docs" / "benchmarks.md"
    argv = ["--results", str(tmp_path / "results"), "--doc", str(doc), "--readme", str(readme)]
    assert report.main(argv) == 0
    text = readme.read_text()
    assert text.startswith("# title\n\nbefore\n\n" + report.BEGIN + "\n| figure |")
    assert text.endswith(report.END + "\n\nafter\n") and "old table" not in text
    summary = text.split(report.BEGIN)[1].split(report.END)[0]
    assert "keystroke p95" in summary and "2 workers against 1" in summary  # the headline figures
    assert "stall" not in summary and "plain against 1" not in summary  # and only those
    assert "abc1234 |" in summary and "2026-12-01" not in summary  # the README holds no dates
    assert report.main(argv) == 0 and readme.read_text() == text  # a second run changes nothing
    assert "| stall (`typing_latency`)" in doc.read_text()


def test_a_readme_without_its_markers_is_refused_and_left_alone(tmp_path, capsys):
    results(tmp_path / "results")
    readme = tmp_path / "README.md"
    readme.write_text("# no markers\n")
    argv = ["--results", str(tmp_path / "results"), "--doc", str(tmp_path / "b.md"), "--readme", str(readme)]
    assert report.main(argv) == 1
    assert "benchmarks:begin" in capsys.readouterr().err
    assert readme.read_text() == "# no markers\n" and not (tmp_path / "b.md").exists()


def test_a_run_that_measures_some_figures_keeps_the_others_with_their_own_provenance(tmp_path):
    folder = tmp_path / "results"
    record.write("typing_latency", [record.figure("MiniLM p95", 11.0, "ms", goal=16.0),
                                    record.figure("SmolLM2 p95", 28.0, "ms", goal=33.0)],
                 folder=folder, measured=WHERE)
    record.write("typing_latency", [record.figure("SmolLM2 p95", 35.0, "ms", goal=33.0)],
                 folder=folder, measured={**WHERE, "commit": "new0000", "date": "2026-12-05"})
    doc = json.loads((folder / "typing_latency.json").read_text())
    assert [f["name"] for f in doc["figures"]] == ["MiniLM p95", "SmolLM2 p95"]
    kept, new = doc["figures"]
    assert record.provenance(doc, kept)["commit"] == "abc1234"
    assert record.provenance(doc, new)["commit"] == "new0000" and new["value"] == 35.0


def test_the_committed_results_render_and_the_readme_summary_is_current():
    """benchmarks/results/ is data the report reads; the README's table is the report's own."""
    docs = report.load(record.RESULTS)
    assert docs, "no results files"
    for doc in docs:
        for fig in doc["figures"]:
            where = record.provenance(doc, fig)
            assert where["commit"] and where["date"] and where["machine"]["cpu"], fig["name"]
    readme = (record.ROOT / "README.md").read_text(encoding="utf-8")
    assert report.rewrite_readme(readme, docs) == readme, "run python -m benchmarks.report"
    page = (record.ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page == report.render_doc(docs), "run python -m benchmarks.report"


def test_the_machine_names_its_vector_instructions_where_recorded():
    assert report.machine_text({**MACHINE, "vectors": "AVX2"}).startswith("Test CPU (AVX2), 2 cores")
    assert report.machine_text(MACHINE).startswith("Test CPU, 2 cores")  # (older files: not recorded)
    # the kernels' compiler, whose runtime is part of every RSS figure
    assert report.machine_text({**MACHINE, "numba": "0.68.1"}).startswith("Test CPU, 2 cores, numba 0.68.1")
    # what the kernels compile for, not what the CPU lists (an AVX-512 CPU without VNNI runs the
    # 16-lane float kernels; a run with AVX turned off in numba the narrow ones)
    assert [record.vectors_label(*paths) for paths in ((True, True, False), (False, True, False),
                                                       (False, False, True), (False, False, False))] == [
        "AVX-512 VNNI", "AVX-512", "AVX2", "below AVX2"]
    from attnviz.engine.computing import qdot
    assert record.machine()["vectors"] == record.vectors_label(qdot.VNNI, qdot.PERMUTE, qdot.MADD)


def test_a_committed_ratios_runs_are_ratios():
    """A figure in x (a ratio) that records several runs records the ratio of each: its value, their
    median, lies among them (runs of milliseconds under x read as ratios in the tables)."""
    import json
    from pathlib import Path

    for path in sorted(Path(__file__).resolve().parents[1].glob("benchmarks/results/*.json")):
        for fig in json.loads(path.read_text(encoding="utf-8"))["figures"]:
            runs = fig.get("runs") or []
            if fig["unit"] == "x" and len(runs) > 1:
                assert min(runs) - 1e-9 <= fig["value"] <= max(runs) + 1e-9, (path.name, fig["name"])
