"""benchmarks/gen_length.py: the lines fitted to each path's medians and where they cross."""

import pytest

from benchmarks.gen_length import argv_of, crossover, fit


def test_a_line_is_fitted_exactly_and_the_crossover_is_where_two_meet():
    ns = [4, 16, 64]
    kernels = fit(ns, [1.5 + 0.005 * n for n in ns])
    float32 = fit(ns, [1.2 + 0.025 * n for n in ns])
    assert kernels == pytest.approx((1.5, 0.005)) and float32 == pytest.approx((1.2, 0.025))
    assert crossover({"kernels": kernels, "float32": float32}) == pytest.approx(15.0)
    assert crossover({"kernels": (1.0, 0.005), "float32": float32}) == 0.0  # faster at every length
    assert crossover({"kernels": kernels, "float32": (1.2, 0.005)}) is None  # steps not faster


def test_each_run_makes_exactly_n_tokens_on_the_path_forced():
    argv = argv_of("kernels", 16)
    assert argv[3] == "kernels" and argv[4] == "generate"
    assert argv[argv.index("--max-new") + 1] == "16" and "--ignore-eos" in argv
