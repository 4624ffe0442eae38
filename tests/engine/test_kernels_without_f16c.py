"""The kernels on a CPU without F16C: float16 scales (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) converted to
float32 with integer arithmetic (engine/computing/qdot.py, _half_bits), since LLVM's conversion
there is a call numba does not link (the process aborted: "Symbol not found: __extendhfsf2").
numba compiles for a generic x86-64 in a fresh process (NUMBA_CPU_NAME=generic, an empty cache).

Each weight is read alone (x one-hot), so y is one product, scale q, with nothing summed: it must
equal the dequantised weight exactly, for scales that are normal, subnormal, zero, negative or
the largest float16."""

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]
SCALES = np.array([1.0, -0.5, 2.0 ** -24, -3 * 2.0 ** -24, 1023 * 2.0 ** -24, 2.0 ** -14, 0.0, -0.0,
                   65504.0, 1e-3, -7.25, 0.1, 2.0 ** -20, 3.0, -65504.0, 0.3], np.float16)


def _tensor() -> np.ndarray:
    """Q8_0 [16 rows, 2 blocks]: row r's first block scaled by SCALES[r], its second by
    -SCALES[15 - r]; its integers a ramp through -128..127."""
    _, size = GGML_QUANT_SIZES[Q.Q8_0]
    raw = np.zeros((16, 2, size), np.uint8)
    raw[:, 0, :2] = SCALES[:, None].view(np.uint8)
    raw[:, 1, :2] = (-SCALES[::-1])[:, None].view(np.uint8)
    q = (np.arange(16 * 64).reshape(16, 2, 32) * 37 % 256 - 128).astype(np.int8)
    raw[:, :, 2:] = q.view(np.uint8)
    return raw.reshape(16, 2 * size)


def one_hot_outputs() -> tuple[np.ndarray, bool]:
    """(y [64 inputs, 16 rows], whether the conversion is the CPU's): the serial Q8_0 kernel on
    each one-hot x (qbytes': the integer one where the CPU has VNNI)."""
    from attnviz.engine.computing import qbytes, qdot
    from attnviz.engine.reading.qpack import pack

    args = pack(_tensor(), Q.Q8_0).args
    kernel = qbytes.SERIAL[qbytes.k_b32]
    ys = np.empty((64, 16), np.float32)
    for j in range(64):
        x = np.zeros((1, 64), np.float32)
        x[0, j] = 1.0
        kernel(*args, x, ys[j:j + 1])
    return ys, qdot.HALF_IN_HARDWARE


def _check(ys):
    w = gguf.quants.dequantize(_tensor(), Q.Q8_0).astype(np.float32)  # [16, 64]: d q, exact
    assert np.array_equal(ys, w.T)


def test_float16_scales_on_this_cpu_are_exact():
    ys, _ = one_hot_outputs()
    _check(ys)


def test_float16_scales_on_a_cpu_without_f16c_are_exact(tmp_path):
    env = {**os.environ, "NUMBA_CPU_NAME": "generic", "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": str(ROOT)}
    env.pop("NUMBA_CPU_FEATURES", None)
    out = tmp_path / "ys.npy"
    subprocess.run([sys.executable, __file__, str(out)], env=env, check=True, timeout=600,
                   capture_output=True, text=True)
    ys = np.load(out)
    _check(ys)


if __name__ == "__main__":  # (the subprocess above: numba compiling for a generic CPU)
    ys, in_hardware = one_hot_outputs()
    if in_hardware:
        sys.exit("the generic CPU was taken to have F16C")
    np.save(sys.argv[1], ys)
