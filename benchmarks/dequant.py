"""GGUF dequantisation (not a test): gguf.quants.dequantize against the loader's
engine/reading/dequant.dequantize_into on the same blocks, in turns, for the common block types.
The blocks are random bytes with sane float16 scales (a [1536, 768] matrix's worth of weights,
about a SmolLM2 MLP matrix); both give the same values bit for bit (checked here too).

    .venv/bin/python -m benchmarks.dequant [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from benchmarks import record

# where each type keeps its float16 scales (byte offsets in a block): set to a sane value, so no
# NaN, Inf or subnormal slows either side
SCALES = {"Q4_0": (0,), "Q4_1": (0, 2), "Q8_0": (0,), "Q5_0": (0,), "Q5_1": (0, 2),
          "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (-2,), "Q3_K": (-2,), "Q2_K": (-4, -2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType as Q
    from gguf.quants import dequantize

    from attnviz.engine.reading.dequant import dequantize_into

    rows, cols = 1536, 768
    rng = np.random.default_rng(0)
    print(f"{rows} x {cols} weights per matrix, median of {args.rounds} rounds, the two in turns")
    print(f"{'type':<6}{'gguf ns/weight':>16}{'ours ns/weight':>16}{'ratio':>8}")
    figures = []
    for name, offsets in SCALES.items():
        qtype = Q[name]
        block, size = GGML_QUANT_SIZES[qtype]
        raw = rng.integers(0, 256, size=(rows, cols // block * size), dtype=np.uint8)
        blocks = raw.reshape(-1, size)
        for off in offsets:
            start = off % size
            blocks[:, start:start + 2] = np.array([0.01], np.float16).view(np.uint8)
        out = np.empty((rows, cols), np.float32)
        theirs, ours = [], []
        with np.errstate(all="ignore"):
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                want = dequantize(raw, qtype)
                theirs.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                dequantize_into(raw, qtype, out)
                ours.append(time.perf_counter() - t0)
        assert np.array_equal(out.view(np.uint32), np.asarray(want, np.float32).view(np.uint32)), name
        a, b = statistics.median(theirs), statistics.median(ours)
        print(f"{name:<6}{a / (rows * cols) * 1e9:>16.2f}{b / (rows * cols) * 1e9:>16.2f}{a / b:>7.2f}x")
        figures.append(record.figure(
            f"{name}: gguf's dequantize time / the loader's", a / b, "x",
            runs=[x / y for x, y in zip(theirs, ours)],
            note=f"median of {args.rounds} rounds in turns, {rows} x {cols} weights"))
    record.write("dequant", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
