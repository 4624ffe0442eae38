"""The command line as a user runs it: `python -m attnviz ...` in a real process (exit codes, one-line
errors, the window's no-display message, output into a closed pipe)."""

import subprocess
import sys

import numpy as np

SENTENCE = "The keys to the cabinet are on the table."


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "attnviz", *args], capture_output=True, text=True)


def test_cli_attention_npz(tmp_path):
    out = tmp_path / "a.npz"
    proc = _cli("attention", "--model", "all-MiniLM-L6-v2", "--text", SENTENCE, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    data = np.load(out)
    assert list(data["tokens"])[:3] == ["[CLS]", "the", "keys"]
    assert data["attentions"].dtype == np.float32 and data["attentions"].shape[:2] == (6, 12)
    assert data["kv_group"].tolist() == list(range(12))
    proc = _cli("attention", "--model", "all-MiniLM-L6-v2", "--ids", "1996,6309,2000", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert np.load(out)["input_ids"].tolist() == [1996, 6309, 2000]


def test_cli_bad_input_one_line(tmp_path):
    for args in (["attention", "--ids", "1,x", "--out", str(tmp_path / "a.npz")],
                 ["attention", "--model", str(tmp_path / "nope"), "--text", "a", "--out",
                  str(tmp_path / "a.npz")],
                 ["attention", "--text", "a", "--out", str(tmp_path / "no" / "dir" / "a.npz")]):
        proc = _cli(*args)
        assert proc.returncode != 0
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not list(tmp_path.glob("**/*.tmp"))


def test_cli_models_lists_default():
    proc = _cli("models")
    assert proc.returncode == 0 and "all-MiniLM-L6-v2" in proc.stdout and "6 x 12" in proc.stdout


def test_cli_usage_errors_are_one_line():
    for args in (["calc", "--d-model", "abc"], ["heads"], ["attention", "--text", "a"]):
        proc = _cli(*args)
        assert proc.returncode == 2
        assert len(proc.stderr.strip().splitlines()) == 1 and "--help" in proc.stderr, proc.stderr


def test_cli_window_without_display_says_so():
    import os
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    proc = subprocess.run([sys.executable, "-m", "attnviz"], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 2 and "no display" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_truncate_flag(tmp_path):
    long_text = "word " * 600  # past MiniLM's 512 positions
    proc = _cli("find", "--model", "all-MiniLM-L6-v2", "--text", long_text, "--from", "word@1", "--to", "word@2")
    assert proc.returncode == 2 and "--truncate" in proc.stderr
    proc = _cli("find", "--model", "all-MiniLM-L6-v2", "--text", long_text, "--from", "word@1", "--to", "word@2",
                "--truncate", "--top", "1")
    assert proc.returncode == 0, proc.stderr



def test_cli_output_into_a_closed_pipe_is_quiet():
    proc = subprocess.Popen([sys.executable, "-m", "attnviz", "heads", "--probe"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Broken pipe" not in err and "Traceback" not in err, err
