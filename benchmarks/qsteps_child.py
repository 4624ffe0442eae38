"""A child process of qsteps' goal figures (benchmarks/qsteps_processes.py): SmolLM2 loaded anew,
generate's steps at T = 64 and 512 against this process's own floor, one JSON line printed.

    python -m benchmarks.qsteps_child [--repeat 15] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from benchmarks import qsteps
from benchmarks.pair_floor import packed_arrays, packed_bytes
from benchmarks.qsteps_processes import TS, load_smollm2, summary
from benchmarks.streaming import read_ms


def measure(repeat: int, threads: int) -> dict:
    """A child's figures (summary's): generate's steps at each of TS in this process, against its
    fastest read of the packed arrays."""
    qsteps.THREADS[0] = threads
    model, _, _ = load_smollm2(threads)
    store = model.weights.layers
    packed = packed_bytes(store)
    arrays = packed_arrays(store)
    rng = np.random.default_rng(0)  # (qsteps' tokens)
    ids = rng.integers(100, model.config.vocab_size, 600).tolist()
    fresh = iter(rng.integers(100, model.config.vocab_size, 100_000).tolist())
    head = model.lm_head()
    runs, reads = {}, []
    for T in TS:
        qsteps._as_generate(model, head, ids, fresh, T, 1, arrays)  # (a fresh process's first calls)
        steps, ratios, gen_reads, taken = qsteps._as_generate(model, head, ids, fresh, T, repeat, arrays)
        runs[T] = (steps, ratios, taken)
        reads += gen_reads
    read, read_bytes = read_ms(arrays, 25)
    return summary(runs, packed * min([read] + reads) / read_bytes, qsteps.BLOCK, os.getloadavg()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="timed blocks at each T")
    ap.add_argument("--threads", type=int, default=1,
                    help="BLAS and kernel threads, as qsteps' --threads")
    args = ap.parse_args()
    print(json.dumps(measure(args.repeat, args.threads)), flush=True)


if __name__ == "__main__":
    main()
