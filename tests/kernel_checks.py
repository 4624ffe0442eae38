"""What the quantised-kernel tests share (tests/engine/test_qdot.py, test_qbytes.py): the bound each
output is held to (tests/engine/test_qmatvec.py's docstring says why: 1e-5 of the sum of its terms'
sizes), blocks whose every position holds another weight (a swapped half or nibble shows), x of
wide range with a nan, and a listener that notes what numba compiles."""

import gguf
import numpy as np

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.reading.qpack import pack

REL = 1e-5


def check_within_rel(y, x, w):
    """Each output within REL of sum_j |x_j w_rj| of the float64 product."""
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    scale = np.abs(x) @ np.abs(w).T
    err = np.abs(y - ref)
    assert np.all(err <= REL * scale + 1e-30), f"worst {np.max(err / (scale + 1e-30)):.2e} of scale"


def climbing_blocks(qtype, n_out, n_in, rng):
    """Blocks (gguf's quantiser) whose weights climb along the inputs and differ by row."""
    w = rng.standard_normal((n_out, n_in)).astype(np.float32) * 0.1
    w += np.linspace(-1, 2, n_in, dtype=np.float32) + np.arange(n_out, dtype=np.float32)[:, None] / n_out
    return gguf.quants.quantize(w, qtype)


def check_wide_range_and_nan(raw, qtype, rng):
    """The kernel on x whose sub-blocks each hold an outlier 1000 times the rest, and on x of 1e-30
    and 1e30: within REL; a nan in x reaches every output of its row, as in the float32 product."""
    n_in = raw.shape[1] // gguf.GGML_QUANT_SIZES[qtype][1] * gguf.GGML_QUANT_SIZES[qtype][0]
    w = gguf.quants.dequantize(raw, qtype).astype(np.float32)
    x = rng.standard_normal((3, n_in)).astype(np.float32)
    x[0, 5::32] = 1000.0
    x[1] *= np.float32(1e-30)
    x[2] *= np.float32(1e30)
    check_within_rel(qm.qmatvec(pack(raw, qtype), x), x, w)
    x[1, 7] = np.nan
    assert np.isnan(qm.qmatvec(pack(raw, qtype), x[1:2])).all()


def check_rows_restart_and_threads_agree(raw, qtype, rng):
    """Rows of x that are the same vector give the same y (a group's running sum restarts for each
    row, a differing row in between), and the parallel kernel equals its serial twin bit for bit."""
    p = pack(raw, qtype)
    x = np.repeat(rng.standard_normal((1, p.n_in)).astype(np.float32), 4, axis=0)
    x[2] *= -3  # a row in between that differs
    kernel = qm._kernel_of(p)
    a, b = np.empty((4, p.q.shape[0] * 16), np.float32), np.empty((4, p.q.shape[0] * 16), np.float32)
    kernel(*p.args, x, a)
    qm.SERIAL[kernel](*p.args, x, b)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[0], a[1])
    np.testing.assert_array_equal(a[0], a[3])
    check_within_rel(a, x, gguf.quants.dequantize(raw, qtype).astype(np.float32))


def spy_on_block_compiles(monkeypatch) -> list:
    """qmatvec as a fresh process finds it (nothing warmed yet), and the one-row block's and
    stack's compiles recorded as they are asked for: [(compile_block or compile_stack, scale
    dtype name), ...] (each still compiles, or loads, as it would)."""
    from attnviz.engine.computing import onerow_block, onerow_stack
    monkeypatch.setattr(qm, "_warmed", {})
    monkeypatch.setattr(qm, "_serial_ready", set())
    monkeypatch.setattr(qm, "_ready_types", set())
    monkeypatch.setattr(qm, "_started", set())
    monkeypatch.setattr(qm, "ONE_ROW", None)
    asked = []
    for module, name in ((onerow_block, "compile_block"), (onerow_stack, "compile_stack")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda scale, real=real, name=name: (
            asked.append((name, np.dtype(scale).name)), real(scale))[1])
    return asked


def listen_for_compiles(seen: list):
    """Register a listener that appends to `seen` the dispatcher of each numba compile from now on
    (numba.core.event.unregister("numba:compile", it) stops it)."""
    from numba.core import event

    class Listener(event.Listener):
        def on_start(self, ev):
            seen.append(str(ev.data.get("dispatcher")))

        def on_end(self, ev):
            pass
    listener = Listener()
    event.register("numba:compile", listener)
    return listener
