"""benchmarks/gen_length.py: the children run `attnviz generate` as a user's shell does, the runs
go in turns, and the crossover is given only where the fitted difference's band brackets it."""

import math
import sys

import pytest

from attnviz import cli
from attnviz.commands import checks
from benchmarks import gen_length
from benchmarks.gen_length import CHILD, PATHS, Line, argv_of, crossover, fit, paired

LENGTHS = [4, 8, 16, 32, 64]


def test_a_line_is_fitted_exactly_and_an_exact_line_has_no_band():
    ns = [4, 16, 64]
    line = fit(ns, [1.5 + 0.005 * n for n in ns])
    assert (line.start, line.step) == pytest.approx((1.5, 0.005))
    assert line.at(100) == pytest.approx(2.0)
    assert line.half_width(0) == pytest.approx(0, abs=1e-9)
    assert line.step_half_width() == pytest.approx(0, abs=1e-9)
    with pytest.raises(ValueError):
        fit([8, 8], [1.0, 2.0])  # one length: no slope


def test_the_band_widens_away_from_the_points_mean_and_two_points_have_none():
    ns = [4, 4, 16, 16, 64, 64]
    line = fit(ns, [1.0 + 0.01 * n + (0.05 if i % 2 else -0.05) for i, n in enumerate(ns)])
    assert line.step == pytest.approx(0.01)
    assert 0 < line.half_width(line.mean_n) < line.half_width(0) < line.half_width(200)
    # s2 = 6 * 0.05^2 / 4; t(4 dof) = 2.776
    assert line.half_width(line.mean_n) == pytest.approx(2.776 * math.sqrt(6 * 0.05 ** 2 / 4 / 6))
    two = fit([4, 64], [1.0, 2.0])
    assert math.isinf(two.half_width(10)) and math.isinf(two.step_half_width())


def test_an_exact_crossing_inside_the_lengths_is_given_with_where_each_path_is_surely_faster():
    ns = [n for n in LENGTHS for _ in range(3)]
    diff = fit(ns, [0.5 - 0.02 * n for n in ns])  # kernels - float32: 0 at N = 25
    cross = crossover(diff, LENGTHS)
    assert cross.at == pytest.approx(25.0)
    assert cross.surely_from == 26  # (at 25 the difference is 0: neither is faster)
    assert "to 24" in cross.says and "from 26" in cross.says


def test_a_noisy_crossing_is_bracketed_by_the_band():
    ns = [n for n in LENGTHS for _ in range(4)]
    noise = [0.03, -0.03, 0.02, -0.02] * len(LENGTHS)
    diff = fit(ns, [0.5 - 0.02 * n + e for n, e in zip(ns, noise)])
    cross = crossover(diff, LENGTHS)
    assert cross.at == pytest.approx(25.0, abs=1.0)
    assert 25 < cross.surely_from < 40  # the band holds 0 a little past the fitted crossing


def test_no_crossover_is_given_outside_the_lengths_measured():
    ns = [n for n in LENGTHS for _ in range(3)]
    everywhere = crossover(fit(ns, [-0.2 - 0.01 * n for n in ns]), LENGTHS)
    assert everywhere.at is None and everywhere.surely_from == 4  # (below 4: not measured)
    assert "below 4" in everywhere.says
    nowhere = crossover(fit(ns, [0.2 + 0.001 * n for n in ns]), LENGTHS)
    assert nowhere.at is None and nowhere.surely_from is None
    assert "float32 path surely the faster at every length" in nowhere.says


def test_a_band_that_spans_the_range_gives_no_crossover():
    ns = [n for n in LENGTHS for _ in range(3)]
    noise = [0.4, -0.4, 0.0] * len(LENGTHS)
    cross = crossover(fit(ns, [0.1 - 0.002 * n + e for n, e in zip(ns, noise)]), LENGTHS)
    assert cross.at is None and cross.surely_from is None
    assert cross.says.startswith("undetermined: the difference's 95 % band holds 0 at 4 to 64")
    two = crossover(fit([4, 64], [0.5, -0.5]), LENGTHS)  # no residuals to judge by: no band
    assert two.at is None and "holds 0 at 4 to 64" in two.says


def test_faster_at_the_long_end_but_unsure_at_the_short_end_gives_only_an_upper_bound():
    ns = [n for n in LENGTHS for _ in range(3)]
    noise = [0.02, -0.02, 0.0] * len(LENGTHS)
    cross = crossover(fit(ns, [0.05 - 0.01 * n + e for n, e in zip(ns, noise)]), LENGTHS)
    assert cross.at is None and cross.surely_from is not None and 5 < cross.surely_from < 16
    assert cross.says.startswith(f"the kernels' path surely the faster from {cross.surely_from} to 64")
    assert cross.says.endswith(f"holds 0 at 4 to {cross.surely_from - 1}: the crossover lies below "
                               f"{cross.surely_from}, not placed")


def test_a_line_with_the_band_of_its_own_fields():
    line = Line(start=1.0, step=-0.1, count=12, mean_n=20.0, sxx=1000.0, s2=0.0)
    assert crossover(line, [4, 8, 16]).at == pytest.approx(10.0)


def test_runs_are_paired_in_the_order_they_were_taken():
    times = {("kernels", 4): [1.0, 2.0], ("float32", 4): [1.5, 1.0], ("kernels", 8): [3.0],
             ("float32", 8): [2.0]}
    assert paired(times, [4, 8]) == ([4, 4, 8], [-0.5, 1.0, 1.0])


def test_every_length_and_path_is_measured_in_turns(monkeypatch):
    calls = []
    monkeypatch.setattr(gen_length, "timed", lambda argv, cold=False: calls.append(
        (argv[3], int(argv[argv.index("--max-new") + 1]), cold)) or float(len(calls)))
    times = gen_length.measure([4, 8, 16], 3, cold=True)
    assert calls[:2] == [("kernels", 4, False), ("float32", 4, False)]  # untimed: caches warm
    timed = calls[2:]
    assert all(cold for _, _, cold in timed) and len(timed) == 3 * 3 * 2
    assert [n for _, n, _ in timed[::2]] == [4, 8, 16, 8, 16, 4, 16, 4, 8]  # the order turned
    assert [p for p, _, _ in timed[:4]] == ["kernels", "float32", "float32", "kernels"]
    assert all(len(times[p, n]) == 3 for p in PATHS for n in (4, 8, 16))


def test_each_run_makes_exactly_n_tokens_on_the_path_forced():
    argv = argv_of("kernels", 16)
    assert argv[3] == "kernels" and argv[4] == "generate"
    assert argv[argv.index("--max-new") + 1] == "16" and "--ignore-eos" in argv


@pytest.mark.parametrize("path", PATHS)
def test_the_child_runs_the_command_as_its_own_process_with_the_path_forced(monkeypatch, path):
    seen = {}

    def main(argv=None):  # cli.main given no argv: the command's own process set-up runs
        seen.update(argv=argv, sys_argv=list(sys.argv), kernels=checks.wants_kernels(None, 1))
        return 0
    monkeypatch.setattr(checks, "wants_kernels", checks.wants_kernels)  # (put back after)
    monkeypatch.setattr(cli, "main", main)
    monkeypatch.setattr(sys, "argv", ["-c", *argv_of(path, 8)[3:]])
    with pytest.raises(SystemExit) as done:
        exec(CHILD, {"__name__": "__main__"})
    assert done.value.code == 0
    assert seen["argv"] is None and seen["sys_argv"][0] == "attnviz"
    assert seen["sys_argv"][1:] == argv_of(path, 8)[4:]
    assert seen["kernels"] is (path == "kernels")


@pytest.mark.parametrize("kernels_start, headline", [
    (0.3, "crossover's upper bound"),  # (faster at every length: no crossover placed, its bound shown)
    (1.0, "crossover, "),  # (slower at short lengths: the crossover itself placed, near 21)
])
def test_the_headline_is_a_figure_that_was_measured(kernels_start, headline):
    """The README's table shows the crossover where one is placed, else its upper bound: never a
    figure the run could not measure while a measured one says what is known."""
    lengths = [8, 16, 24, 32]
    times = {}
    for r, wobble in enumerate((-0.002, 0.0, 0.002)):
        for n in lengths:
            times["float32", n] = times.get(("float32", n), []) + [0.4 + 0.034 * n + wobble]
            times["kernels", n] = times.get(("kernels", n), []) + [kernels_start + 0.006 * n - wobble]
    shown = [f for f in gen_length.figures_of(times, lengths, "warm") if f.get("headline")]
    assert len(shown) == 1
    assert shown[0]["name"].startswith(headline) and shown[0]["value"] is not None
