"""benchmarks/llamacpp.py: which Python runs llama.cpp, the child process's answers (a stand-in
llama_cpp module: CI has none), and the figures' arithmetic, llama.cpp absent or not."""

import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import llamacpp

FAKE = '''
import ctypes
__version__ = "0.0-fake"
LLAMA_FLASH_ATTN_TYPE_DISABLED = 0
N_VOCAB = 7
_LAST = []


class _Params:
    flash_attn_type = 0
    type_k = 1


class Llama:
    def __init__(self, model_path, n_ctx, n_batch, n_threads, n_threads_batch, verbose):
        if open(model_path).read() != "gguf":
            raise ValueError(f"Failed to load model from file: {model_path}")
        assert n_threads == n_threads_batch == 1 and n_ctx >= 513
        self.n_tokens, self.kv, self.ctx, self.context_params = 0, [], object(), _Params()
        self.logits = (ctypes.c_float * N_VOCAB)()
        _LAST[:] = [self]

    def n_vocab(self):
        return N_VOCAB

    def reset(self):
        self.n_tokens = 0

    def eval(self, tokens):  # as llama.cpp's: the positions from n_tokens on are dropped first
        self.kv = self.kv[:self.n_tokens] + list(tokens)
        self.n_tokens = len(self.kv)
        for i in range(N_VOCAB):
            self.logits[i] = float(i == sum(self.kv) % N_VOCAB)  # the top: every token held counts


def llama_print_system_info():
    return b"CPU : AVX512 = 1 | FAKE = 1 | "


def llama_get_logits_ith(ctx, i):
    return ctypes.cast(_LAST[0].logits, ctypes.POINTER(ctypes.c_float))
'''


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return path


def test_a_python_that_imports_llama_cpp_is_taken_and_one_that_cannot_says_why(tmp_path):
    good = _script(tmp_path / "good", "exit 0")
    bad = _script(tmp_path / "bad", "echo \"ModuleNotFoundError: No module named 'llama_cpp'\" >&2; exit 1")
    assert llamacpp.find_llama_python(str(good), tmp_path) == (str(good), "")
    python, why = llamacpp.find_llama_python(str(bad), tmp_path)
    assert python is None and why == f"{bad} cannot import llama_cpp (ModuleNotFoundError: No module named 'llama_cpp')"
    python, why = llamacpp.find_llama_python(str(tmp_path / "none"), tmp_path)
    assert python is None and why == f"{tmp_path / 'none'}: no such Python"


def test_the_default_is_the_dev_venv_beside_the_repository_else_none(tmp_path):
    python, why = llamacpp.find_llama_python(None, tmp_path)  # (not a git folder, no .devvenv)
    assert python is None and why == f"no .devvenv/bin/python beside {tmp_path} (give --llama-python)"
    (tmp_path / ".devvenv" / "bin").mkdir(parents=True)
    dev = _script(tmp_path / ".devvenv" / "bin" / "python", "exit 0")
    assert llamacpp.default_pythons(tmp_path) == [dev]
    assert llamacpp.find_llama_python(None, tmp_path) == (str(dev), "")


def test_a_worktree_finds_the_dev_venv_of_its_main_checkout(tmp_path):
    main, tree = tmp_path / "main", tmp_path / "tree"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run(git + ["init", "-q", str(main)], check=True)
    subprocess.run(git + ["-C", str(main), "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    subprocess.run(git + ["-C", str(main), "worktree", "add", "-q", "-b", "w", str(tree)], check=True)
    (main / ".devvenv" / "bin").mkdir(parents=True)
    dev = _script(main / ".devvenv" / "bin" / "python", "exit 0")
    assert llamacpp.default_pythons(tree) == [dev.resolve()]


def test_the_child_process_times_each_token_after_the_same_prompt(tmp_path, monkeypatch):
    (tmp_path / "llama_cpp").mkdir()
    (tmp_path / "llama_cpp" / "__init__.py").write_text(FAKE)
    (tmp_path / "model.gguf").write_text("gguf")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    child = llamacpp.LlamaChild(sys.executable, tmp_path / "model.gguf", 1)
    try:
        assert child.info == {"version": "0.0-fake", "system": "CPU : AVX512 = 1 | FAKE = 1",
                              "flash_attn": 0, "type_k": 1}
        got = child.steps([1, 2, 3], [4, 5, 6])  # each after the prompt alone: 6 + token
        assert got["top"] == [(6 + t) % 7 for t in (4, 5, 6)]
        assert len(got["ms"]) == 3 and all(ms >= 0 for ms in got["ms"])
        assert child.steps([2], [3])["top"] == [5]  # a new prompt: run from the start
    finally:
        child.close()
    assert child.proc.returncode == 0
    assert "flash attention off" in llamacpp.about_llama(child.info)


def test_a_file_llama_cpp_cannot_load_is_a_one_line_error(tmp_path, monkeypatch):
    (tmp_path / "llama_cpp").mkdir()
    (tmp_path / "llama_cpp" / "__init__.py").write_text(FAKE)
    (tmp_path / "model.gguf").write_text("not a model")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(llamacpp.LlamaError, match=r"process ended \(exit status 1\): ValueError: "
                                                  r"Failed to load model from file"):
        llamacpp.LlamaChild(sys.executable, tmp_path / "model.gguf", 1)


OURS = {"ms": [4.0, 5.0, 7.0], "layers": [3.0, 4.0, 5.0], "head": [1.0, 1.0, 2.0]}
FLOORS = {"layers": 2.0, "all": 2.5, "bytes": {"layers": 66e6, "all": 96e6}}


def test_the_ratios_are_the_medians_against_each_other_and_the_floors():
    llama = {"ms": [10.0, 12.0, 30.0], "agree": 3}
    figs = {f["name"]: f for f in llamacpp.step_figures(64, OURS, llama, FLOORS, about="b", load=0.5)}
    value = {name: f["value"] for name, f in figs.items()}
    assert value["decode step T = 64, attnviz"] == 5.0 and value["decode step T = 64, llama.cpp"] == 12.0
    assert value["decode step T = 64: attnviz / llama.cpp"] == pytest.approx(5.0 / 12.0)
    assert "decode step T = 64: llama.cpp / quantised-bytes floor" not in value  # (a floor of less than it reads)
    assert value["decode step T = 64: llama.cpp / floor of the layers' and unembedding's bytes"] == \
        pytest.approx(12.0 / 2.5)
    assert value["decode step T = 64: attnviz's layers / quantised-bytes floor"] == pytest.approx(4.0 / 2.0)
    assert value["decode step T = 64: attnviz / floor of the layers' and unembedding's bytes"] == \
        pytest.approx(5.0 / 2.5)
    assert figs["decode step T = 64, llama.cpp"]["runs"] == llama["ms"]
    assert statistics.median(figs["decode step T = 64: attnviz's layers / quantised-bytes floor"]["runs"]) == 2.0
    assert all(f["goal"] is None and f["note"].endswith("load average 0.5") for f in figs.values())


def test_without_llama_cpp_its_figures_are_absent_with_the_reason_and_ours_measured():
    figs = llamacpp.step_figures(512, OURS, None, FLOORS, why="no .devvenv/bin/python beside /r")
    llama = [f for f in figs if "llama.cpp" in f["name"]]
    assert len(llama) == 3 and all(f["value"] is None for f in llama)
    assert all(f["note"] == "llama.cpp not available: no .devvenv/bin/python beside /r; load average 0.0"
               for f in llama)
    assert [f["value"] for f in figs if "llama.cpp" not in f["name"]] == [5.0, 2.0, 2.0]
