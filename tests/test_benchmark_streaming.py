"""benchmarks/streaming.py: the memory floor's plain read covers every byte of the arrays it is given;
the benchmarks that read a step against one float32 matrix-vector pass name that pass a reference,
not a floor, and show the read floor beside it where they measured it."""

import json

import numpy as np
import pytest

from benchmarks import longdoc, record, smollm2_report, streaming


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 4099])
def test_words_and_rest_are_every_byte_in_order(n):
    a = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    words, rest = streaming._words(a)
    assert words.dtype == np.uint64 and words.size == n // 8 and rest.size == n % 8
    assert np.concatenate([words.view(np.uint8), rest]).tobytes() == a.tobytes()


def test_the_reads_combine_every_byte():
    a = np.random.default_rng(1).integers(0, 256, 1000, dtype=np.uint8)
    words, rest = streaming._words(a)
    expected = np.bitwise_xor.reduce(words.view(np.uint64)) if words.size else 0
    assert streaming._read64(words) == expected
    assert streaming._read8(rest) == np.bitwise_xor.reduce(rest)


def test_read_ms_counts_the_bytes_of_arrays_of_any_type():
    arrays = [np.ones((3, 5), np.float16), np.zeros(13, np.uint8), np.ones((2, 2), np.float32)]
    ms, nbytes = streaming.read_ms(arrays, repeat=2)
    assert nbytes == 30 + 13 + 16
    assert 0 < ms < float("inf")


STEP = {"step_s": 0.02, "pass_s": 0.01, "pass_bytes": 405 * 2 ** 20, "pass_gbps": 42.5, "pass_ratio": 2.0,
        "read_s": 0.005, "read_gbps": 84.9, "read_ratio": 4.0}


def test_smollm2_reads_its_cached_step_against_the_pass_with_its_goal_and_the_read_floor_beside():
    by_pass, by_read = smollm2_report.step_figures(1, STEP, record)
    assert by_pass["value"] == 2.0 and by_pass["goal"] == 2.0 and by_pass["met"] is True
    assert by_pass["name"].endswith("against one float32 matrix-vector pass over the model's layer "
                                    "matrices without the unembedding (a reference, not a floor)")
    assert by_read["value"] == 4.0 and by_read["goal"] is None
    assert "read floor" in by_read["name"] and "5.0 ms" in by_read["note"]
    # at two threads no read floor is measured (one thread's read is no floor for two)
    assert [f["value"] for f in smollm2_report.step_figures(2, {**STEP, "read_s": None}, record)] == [2.0]


def test_longdoc_reads_a_generated_step_against_the_pass_and_its_results_carry_the_same_names():
    runs = [{**STEP, "T": T, "pass_ratio": ratio, "tokens_per_s": 50.0}
            for T, ratio in ((64, 1.5), (512, 2.5), (2048, 3.0))]
    figs = longdoc.figures({"sgemm_flops": 1e11, "forward": [], "generate": runs, "zoom": [], "scores": []})
    assert [(f["value"], f["goal"], f["met"]) for f in figs] == [(1.5, 2.0, True), (2.5, 2.0, False),
                                                                  (3.0, None, None)]
    assert all(f["name"].endswith(longdoc.STEP_AGAINST) and "4.00x" in f["note"] for f in figs)
    kept = json.loads((record.RESULTS / "longdoc.json").read_text())["figures"]
    steps = [f["name"] for f in kept if f["name"].startswith("a generated step")]
    assert steps and all(name.endswith(longdoc.STEP_AGAINST) for name in steps)  # a rerun replaces them
