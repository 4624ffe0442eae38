"""`generate` on a large GGUF file, or of many tokens on any GGUF file, multiplies on its blocks (the
quantised kernels, one thread each), its layers and unembedding packed instead of expanded to
float32; a short run on a smaller file (SmolLM2's) and a model folder keep the float32 path, and
`predict` keeps it. Either way the output is the
same: the same tokens, and every logprob within the kernels' float32 rounding of the float32
path's (commands/checks.py load_for_generation)."""

import json

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.commands import checks
from attnviz.engine import parallel
from attnviz.engine.computing import onerow_pair
from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading import qpack
from attnviz.engine.reading.registry import resolve
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

IDS = "3,1,4,1,5,9"
BOUND = 1e-4  # a logprob on the kernels against the float32 product (float32 rounding, summed)


@pytest.fixture
def restored():
    """The process-wide choices a command makes (kernels asked for, their threads) not made yet, as
    a command's own process starts (this one's kernels may be capped: by a window opened before, or
    to an xdist worker's share of the cores); put back after the test, with the cores' limit a test
    sets (conftest's _kernels_as_before_each_test)."""
    qpack.ask_for_kernels(False)
    parallel.limit_kernel_threads(None)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny llama's GGUF in Q8_0 (its unembedding too) and its config."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    return write_gguf(tmp_path_factory.mktemp("q8") / "q8.gguf", cfg, tensors, Q.Q8_0), cfg


@pytest.fixture
def products(monkeypatch):
    """(rows, outputs) of every product linear() or the head takes on packed blocks."""
    calls = []
    real = qm.qlinear

    def counted(x, pm):
        calls.append((x.shape[0], pm.n_out))
        return real(x, pm)
    monkeypatch.setattr(qm, "qlinear", counted)
    return calls


def _json_of(capsys, argv) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _assert_close(got, want, path="") -> None:
    """Equal structures and values, floats within BOUND."""
    assert type(got) is type(want), path
    if isinstance(got, dict):
        assert got.keys() == want.keys(), path
        for k in got:
            _assert_close(got[k], want[k], f"{path}.{k}")
    elif isinstance(got, list):
        assert len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_close(g, w, f"{path}[{i}]")
    elif isinstance(got, float):
        assert abs(got - want) <= BOUND, (path, got, want)
    else:
        assert got == want, path


def test_the_rule_is_a_gguf_files_size_or_the_runs_length(tiny, monkeypatch):
    path, _ = tiny
    size = path.stat().st_size
    monkeypatch.setattr(checks, "KERNELS_FROM", size)
    assert checks.wants_kernels(path) and checks.wants_kernels(path, 1)
    monkeypatch.setattr(checks, "KERNELS_FROM", size + 1)
    assert not checks.wants_kernels(path, checks.KERNELS_STEPS - 1)
    assert checks.wants_kernels(path, checks.KERNELS_STEPS)  # a long run: any GGUF file
    monkeypatch.setattr(checks, "KERNELS_FROM", 0)
    assert not checks.wants_kernels(FIXTURES / "llama_gqa", 10**6)  # a folder: float32 as before


def test_smollm2_takes_the_kernels_for_a_long_run_only():
    where = resolve("SmolLM2-135M-Instruct")[1]
    assert not checks.wants_kernels(where, checks.KERNELS_STEPS - 1)
    assert checks.wants_kernels(where, checks.KERNELS_STEPS)


def test_predict_keeps_the_float32_path_whatever_the_files_size(tiny, capsys, monkeypatch, restored,
                                                                products):
    path, _ = tiny
    monkeypatch.setattr(checks, "KERNELS_FROM", 0)
    _json_of(capsys, ["predict", "--model", str(path), "--ids", IDS, "--json"])
    assert products == [] and not qpack.kernels_on()


def test_generate_on_the_kernels_prints_what_the_float32_path_prints(tiny, capsys, monkeypatch,
                                                                     restored, products):
    path, cfg = tiny
    argv = ["generate", "--model", str(path), "--ids", IDS, "--max-new", "4", "--ignore-eos", "--json"]
    monkeypatch.setattr(checks, "KERNELS_FROM", path.stat().st_size + 1)
    want = _json_of(capsys, argv)
    assert products == [] and not qpack.kernels_on()
    monkeypatch.setattr(checks, "KERNELS_FROM", path.stat().st_size)
    got = _json_of(capsys, argv)
    assert qpack.kernels_on() and parallel.kernel_threads() == 1
    # the layers' products on their blocks (the prompt's rows, then one a step), and every step's
    # logits from the unembedding's blocks, one row each
    assert {rows for rows, n in products if n != cfg["vocab_size"]} == {len(IDS.split(",")), 1}
    assert [rows for rows, n in products if n == cfg["vocab_size"]] == [1] * 4
    assert got["new_ids"] == want["new_ids"]
    _assert_close(got, want)


def _covered(folder):
    """The tiny Llama with an MLP of 64, in Q8_0: a step's layers in one compiled call
    (onerow_stack covers it; tests/engine/test_onerow_stack.py's `covered`)."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    rng = np.random.default_rng(7)
    for i in range(cfg["num_hidden_layers"]):
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            w = rng.standard_normal((64, cfg["hidden_size"])) * 0.2
            tensors[f"blk.{i}.{name}.weight"] = w.astype(np.float32)
    return write_gguf(folder / "covered.gguf", dict(cfg, intermediate_size=64), tensors, Q.Q8_0)


def test_generate_on_the_kernels_takes_two_threads_for_its_steps_with_the_same_tokens(
        tmp_path, capsys, monkeypatch, restored):
    """Where the process has 2 cores: the steps' layers on two threads (onerow_pair's calls, the
    first on one thread: the fallback's reference); on one core none; the same output either way."""
    path = _covered(tmp_path)
    qm.warm([Q.Q8_0])  # (its one-row stack too: an earlier run on an uncovered file warmed Q8_0 without)
    monkeypatch.setattr(checks, "KERNELS_FROM", 0)
    argv = ["generate", "--model", str(path), "--ids", IDS, "--max-new", "8", "--ignore-eos", "--json"]

    def run(cores):
        parallel.limit_cores(cores)
        before = dict(onerow_pair.TAKEN)
        out = _json_of(capsys, argv)
        return out, {k: onerow_pair.TAKEN[k] - before[k] for k in before}
    two, taken = run(None)
    if onerow_pair.AVAILABLE and parallel.cores() >= 2:
        assert taken["one"] >= 1 and taken["pair"] >= onerow_pair.PAIR_RUNS
    else:
        assert taken == {"pair": 0, "one": 0}
    one, taken_one = run(1)
    assert taken_one == {"pair": 0, "one": 0} and parallel.kernel_threads() == 1
    for out in (one, two):  # (the KV bytes held differ between a process's first run and its second)
        for step in out["steps"]:
            step.pop("kv_held_bytes")
    assert two == one


def test_a_long_generation_on_a_small_file_takes_the_kernels_and_chooses_the_same_tokens(
        tiny, capsys, monkeypatch, restored, products):
    path, _ = tiny
    monkeypatch.setattr(checks, "KERNELS_FROM", path.stat().st_size + 1)
    monkeypatch.setattr(checks, "KERNELS_STEPS", 4)
    argv = ["generate", "--model", str(path), "--ids", IDS, "--ignore-eos", "--json", "--max-new"]
    short = _json_of(capsys, [*argv, "3"])
    assert products == [] and not qpack.kernels_on()
    long = _json_of(capsys, [*argv, "4"])
    assert products and qpack.kernels_on() and parallel.kernel_threads() == 1
    assert long["new_ids"][:3] == short["new_ids"]
    _assert_close(long["steps"][:3], short["steps"])


def test_the_cpu_flags_choose_the_crossover():
    """VNNI and VBMI both listed: the fast kernels' flags; either missing, or no flags line: not."""
    line = "flags\t\t: fpu sse avx2 avx512f {}\n"
    assert checks.vnni_cpu("processor\t: 0\n" + line.format("avx512_vnni avx512vbmi"))
    assert not checks.vnni_cpu(line.format("avx512_vnni"))
    assert not checks.vnni_cpu(line.format("avx512vbmi"))
    assert not checks.vnni_cpu("processor\t: 0\n")


def test_numba_told_another_cpu_takes_the_later_crossover(monkeypatch):
    """NUMBA_CPU_NAME or NUMBA_CPU_FEATURES: the kernels are compiled without the host's VNNI."""
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        with monkeypatch.context() as m:
            m.setenv(name, "generic")
            assert not checks.vnni_cpu()
