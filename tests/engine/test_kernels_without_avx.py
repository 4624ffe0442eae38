"""The 4-bit and byte kernels where numba compiles without AVX (NUMBA_ENABLE_AVX=0: numba's default on some
CPUs and VMs that report an older CPU): the AVX-512 table lookup, the VNNI integer sums and the
AVX2 ones (vpmaddubsw) must not be chosen there from the host's own features (LLVM aborted the process: "Do not know how to
split the result of this operator"). A fresh process with an empty numba cache runs the serial
Q4_0, Q4_1 and Q8_0 kernels and checks them against the dequantised product."""

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

ROOT = Path(__file__).resolve().parents[2]


def products() -> dict:
    """{type: (y [2, 32] from the serial kernel, x @ dequantised Wᵀ in float64, sum |x w|)}."""
    from attnviz.engine.computing import qbytes, qmadd
    from attnviz.engine.reading.qpack import pack

    rng = np.random.default_rng(7)
    w = rng.standard_normal((32, 128)).astype(np.float32)
    x = rng.standard_normal((2, 128)).astype(np.float32)
    out = {}
    for qtype, serial in ((Q.Q4_0, qmadd.SERIAL[qmadd.k_nib8]), (Q.Q4_1, qmadd.SERIAL[qmadd.k_nib]),
                          (Q.Q8_0, qbytes.SERIAL[qbytes.k_b32])):
        blocks = gguf.quants.quantize(w, qtype)
        y = np.empty((2, 32), np.float32)
        serial(*pack(blocks, qtype).args, x, y)
        deq = gguf.quants.dequantize(blocks, qtype).astype(np.float64)
        out[qtype.name] = (y, x.astype(np.float64) @ deq.T, np.abs(x).astype(np.float64) @ np.abs(deq).T)
    return out


def test_nibble_kernels_without_avx(tmp_path):
    env = {**os.environ, "NUMBA_ENABLE_AVX": "0", "NUMBA_CACHE_DIR": str(tmp_path / "numba"),
           "PYTHONPATH": str(ROOT)}
    for name in ("NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
        env.pop(name, None)
    out = tmp_path / "y.npz"
    done = subprocess.run([sys.executable, __file__, str(out)], env=env, timeout=600,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    got = np.load(out)
    assert got["flags"].tolist() == [False, False, False, False]  # (no table lookup, no VNNI, no AVX2)
    for name in ("Q4_0", "Q4_1", "Q8_0"):
        y, ref, size = got[name + "_y"], got[name + "_ref"], got[name + "_size"]
        assert np.all(np.abs(y - ref) <= 1e-5 * size), name


if __name__ == "__main__":  # (the subprocess above: numba compiling without AVX)
    from attnviz.engine.computing import qbytes, qdot, qmadd

    arrays = {"flags": np.array([qdot.PERMUTE, qdot.VNNI, qbytes.VNNI, qmadd.MADD])}
    for name, (y, ref, size) in products().items():
        arrays.update({name + "_y": y, name + "_ref": ref, name + "_size": size})
    np.savez(sys.argv[1], **arrays)
