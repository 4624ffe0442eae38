"""`python -m attnviz export` in a real process with no display: PNG, SVG and numbers written with
their sidecar and nothing else, the numbers equal the engine's; a bad layer is one line and nonzero."""

import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from attnviz.figures.data import open_sidecar
from export_files import SENTENCE, leftovers
from attnviz.engine.computing.request import RunRequest

# Both sides run BLAS on one thread. How OpenBLAS splits a product between threads can change its
# last bits with some of its kernels (with its AVX2 "Haswell" kernels MiniLM's patterns differ by
# 1.5e-6 between one thread and two), and this test process's thread count is whatever earlier
# tests left it at (opening the window caps it at one for the process's life: ui/app.py); the
# command's process would otherwise take one per core. With the same count, the same bits.
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def run(minilm):
    with threadpool_limits(limits=1, user_api="blas"):
        return minilm.run(SENTENCE, request=RunRequest(use_cache=False))


def _cli(*args, cwd):
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY",
                                                            "QT_QPA_PLATFORM")}
    env.update(ONE_BLAS_THREAD)
    return subprocess.run([sys.executable, "-m", "attnviz", "export", "--model", "all-MiniLM-L6-v2", *args],
                          cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name,args", [("cli.png", ["--layer", "1", "--head", "2", "--width", "700"]),
                                       ("cli.svg", ["--layer", "0", "--width", "900"]),
                                       ("cli.npy", [])])
def test_cli_export_without_display(run, tmp_path, name, args):
    proc = _cli("--text", SENTENCE, *args, "--out", str(tmp_path / name), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = tmp_path / name
    if name.endswith(".npy"):
        np.testing.assert_array_equal(np.load(out), run.attentions)
        assert leftovers(tmp_path) == [name]
    else:
        meta = open_sidecar(out)
        assert meta["text"] == SENTENCE and out.stat().st_size > 1000
        if name.endswith(".png"):
            assert (meta["scope"], meta["layer"], meta["head"], meta["width"]) == ("head", 1, 2, 700)
        else:
            ET.parse(out)
            assert meta["scope"] == "layer"
        assert leftovers(tmp_path) == [name, name + ".json"]


def test_cli_bad_layer_is_one_line_and_nonzero(tmp_path):
    proc = _cli("--layer", "6", "--out", str(tmp_path / "x.png"), cwd=tmp_path)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "layer 6 is out of range" in lines[0] and "0..5" in lines[0]
    assert leftovers(tmp_path) == []
