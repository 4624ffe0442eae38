"""Render the benchmark results (benchmarks/results/*.json) as tables.

    python -m benchmarks.report [--results DIR] [--doc docs/benchmarks.md] [--readme README.md]

docs/benchmarks.md gets one table of every figure: its goal, the latest value, its spread over
runs, the machine, the commit and whether the goal is met. The README gets the same table cut to
the headline figures (the commit without its date), between the two marker lines below, rewritten
in place. The output depends
only on the results files (no clock, no machine of its own), so the same files give the same pages.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.record import RESULTS, ROOT, provenance

BEGIN = "<!-- benchmarks:begin (python -m benchmarks.report rewrites this table) -->"
END = "<!-- benchmarks:end -->"
COLUMNS = ("figure", "goal", "latest", "spread over runs", "machine", "commit", "met")


class ReportError(Exception):
    """A results folder or README the report cannot use; the message names the file."""


def load(folder: Path) -> list[dict]:
    """Every results file in `folder`, by benchmark name."""
    docs = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise ReportError(f"{path}: not JSON ({exc})") from None
        if not isinstance(doc.get("figures"), list):
            raise ReportError(f"{path}: no 'figures' list")
        docs.append(doc)
    return docs


def number(value: float) -> str:
    """A figure as people write it: four significant digits, thousands separated."""
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def _with_unit(value: float, unit: str) -> str:
    return f"{number(value)} {unit}".strip() if unit != "x" else f"{number(value)}x"


def goal_text(fig: dict) -> str:
    if fig.get("goal") is None:
        return "—"
    return ("≤ " if fig.get("goal_is", "max") == "max" else "≥ ") + _with_unit(fig["goal"], fig["unit"])


def met_text(fig: dict) -> str:
    """Met or not, recomputed from value and goal (a file cannot claim a goal it misses)."""
    goal = fig.get("goal")
    if goal is None or fig["value"] is None:  # (no value: not measured, the note says why)
        return "—"
    ok = fig["value"] <= goal if fig.get("goal_is", "max") == "max" else fig["value"] >= goal
    return "met" if ok else "**not met**"


def spread_text(fig: dict) -> str:
    if fig["value"] is None:
        return "not measured"
    runs = fig.get("runs") or [fig["value"]]
    n = max(len(runs), fig.get("n_runs") or 0)
    if n == 1:
        return "1 run"
    if len(runs) == 1:
        return f"{n} runs (each not recorded)"
    if min(runs) == max(runs):
        return f"{_with_unit(runs[0], fig['unit'])} in all {n} runs"
    return f"{number(min(runs))}–{_with_unit(max(runs), fig['unit'])} ({n} runs)"


def machine_text(machine: dict | None) -> str:
    if not machine:
        return "?"
    text = machine.get("cpu", "?")
    if machine.get("vectors"):  # (absent from results written before it was recorded)
        text += f" ({machine['vectors']})"
    text += f", {machine.get('cores', '?')} cores"
    if machine.get("numba"):  # (absent from results written before it was recorded)
        text += f", numba {machine['numba']}"
    if machine.get("blas") and machine.get("blas") != "unknown":
        text += f", {machine['blas']}"
        if machine.get("blas_threads"):
            n = machine['blas_threads']
            text += f" ({n} thread{'' if n == 1 else 's'})"
    if machine.get("load_average") is not None:
        text += f", load {machine['load_average']:g}"
    return text


def rows(docs: list[dict], headline_only: bool = False) -> list[list[str]]:
    out = []
    for doc in docs:
        for fig in doc["figures"]:
            if headline_only and not fig.get("headline"):
                continue
            where = provenance(doc, fig)
            commit = (where.get("commit") or "?") + ("+" if where.get("dirty") else "")
            name = f"{fig['name']} (`{doc['benchmark']}`)"
            if fig.get("note") and not headline_only:
                name += f": {fig['note']}"
            when = commit if headline_only else f"{commit}, {where.get('date') or '?'}"
            value = "not measured" if fig["value"] is None else _with_unit(fig["value"], fig["unit"])
            out.append([name, goal_text(fig), value,
                        spread_text(fig), machine_text(where.get("machine")), when, met_text(fig)])
    return out


def table(body: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def render_doc(docs: list[dict]) -> str:
    """docs/benchmarks.md: every figure of every results file."""
    return (
        "# Benchmarks\n\n"
        "Every figure the benchmarks in `benchmarks/` measure, as their last run wrote it to\n"
        "`benchmarks/results/<name>.json`. This page is made by `python -m benchmarks.report`;\n"
        "rerun a benchmark (`python -m benchmarks.<name>`), then the report, to bring it up to date.\n\n"
        "- **latest**: the value the goal is read against (the note says how a run's value is taken).\n"
        "- **spread over runs**: the smallest and largest of the runs that value comes from.\n"
        "- **met**: the latest value against the goal; a goal missed is shown with its figure.\n"
        "- **machine**: the CPU, in brackets the vector instructions the quantised kernels ran on, where\n"
        "  recorded (AVX-512 VNNI, AVX2...: another inner loop on each; compare figures of one kind).\n"
        "- **commit**: the code measured (`+`: with uncommitted changes), and the date.\n\n"
        "Timings depend on the machine and on what else it runs: compare figures of one machine.\n\n"
        + table(rows(docs)))


def rewrite_readme(text: str, docs: list[dict]) -> str:
    """The README with its summary table (headline figures) between the markers replaced."""
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ReportError(f"the README needs the lines {BEGIN!r} and {END!r}, once each, in order")
    head, rest = text.split(BEGIN)
    _, tail = rest.split(END)
    return head + BEGIN + "\n" + table(rows(docs, headline_only=True)) + END + tail


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = ap.parse_args(argv)
    try:
        docs = load(args.results)
        readme = rewrite_readme(args.readme.read_text(encoding="utf-8"), docs)
    except (ReportError, OSError) as exc:
        print(f"benchmarks.report: {exc}", file=sys.stderr)
        return 1
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    args.doc.write_text(render_doc(docs), encoding="utf-8")
    args.readme.write_text(readme, encoding="utf-8")
    print(f"wrote {args.doc} ({sum(len(d['figures']) for d in docs)} figures) and the summary in "
          f"{args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
