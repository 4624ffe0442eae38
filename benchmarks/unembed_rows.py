"""The logits of M rows over a quantised unembedding, as the window computes them (not a test): the
float32 pass (each block of logits.VOCAB_BLOCK rows dequantised, then one float32 product) against
the kernels' pass (each block packed for the kernels, then their product: qmatvec.ROWS_PASS says
up to how many rows the window takes it), for M = 8 .. 128, one BLAS and kernel thread as in the
window, the next block read ahead on a thread of its own where there are two cores or more. The
two passes run in turns, M for M; the figure is the median of --repeat runs each.

    .venv/bin/python -m benchmarks.unembed_rows [--model NAME_OR_FILE] [--repeat 5] [--rows 8,16,...]
"""

import argparse
import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="a GGUF model (name or file)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rows", default="8,16,32,48,64,96,128", help="row counts M, a comma list")
    args = ap.parse_args()
    from attnviz.engine import load_model
    from attnviz.engine.computing import logits as L
    from attnviz.engine.computing import qmatvec as qm
    from attnviz.engine.parallel import limit_kernel_threads
    from attnviz.engine.reading.qpack import ask_for_kernels
    from benchmarks import record

    ask_for_kernels()
    limit_kernel_threads(1)
    threadpool_limits(1, user_api="blas")
    model = load_model(args.model)
    head = model.lm_head()
    if head.pack is None:
        raise SystemExit(f"{model.name}: its unembedding has no copy for the kernels")
    table = head.w_u.table
    rng = np.random.default_rng(0)

    def timed(m: int, kernels: bool) -> float:
        x = rng.standard_normal((m, model.config.d_model)).astype(np.float32)
        h = L.LMHead(head.norm, head.centred, head.eps, L.Unembedding(table, hold=False),
                     L.PackedUnembedding(table) if kernels else None)
        old, qm.ROWS_PASS = qm.ROWS_PASS, 1 << 30
        try:
            t0 = time.perf_counter()
            L.vocab_logits(h, x)
            return time.perf_counter() - t0
        finally:
            qm.ROWS_PASS = old

    rows = [int(r) for r in args.rows.split(",")]
    timed(rows[0], True)  # (the kernel loaded)
    found = {(m, k): [] for m in rows for k in (False, True)}
    for _ in range(args.repeat):
        for m in rows:
            for k in (False, True):
                found[m, k].append(timed(m, k))
    load = os.getloadavg()[0]
    note = (f"{model.name}, unembedding {table.qtype.name} {list(table.shape)}, 1 thread each (+ one "
            f"reading ahead), median of {args.repeat}, in turns; load average {load:.2f}")
    print(note)
    figures = []
    for m in rows:
        f32, ker = (statistics.median(found[m, k]) * 1e3 for k in (False, True))
        print(f"  M = {m:4d}: float32 pass {f32:8.1f} ms   kernels' pass {ker:8.1f} ms   {ker / f32:5.2f}x")
        figures += [record.figure(f"{model.name}, M = {m}, float32 pass", f32, "ms", note=note),
                    record.figure(f"{model.name}, M = {m}, kernels' pass", ker, "ms", note=note)]
    record.write("unembed_rows", figures)


if __name__ == "__main__":
    main()
