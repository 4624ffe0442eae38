"""Engine speed: attnviz's NumPy forward pass vs Hugging Face eager attention on the same weights.

    python -m benchmarks.engine            # attnviz only
    .devvenv/bin/python -m benchmarks.engine   # + HF transformers (torch, 2 threads) and the ratio

Times are the median of repeated runs after a warm-up, for "token ids in -> every attention
pattern out" (HF: a full forward with output_attentions=True and attn_implementation="eager").
Not a test: run it, read the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.registry import DEFAULT_MODEL, resolve
from benchmarks import record


def median_time(fn, min_runs=5, budget_s=2.0) -> float:
    fn()  # warm-up
    times = []
    t_end = time.perf_counter() + budget_s
    while len(times) < min_runs or (time.perf_counter() < t_end and len(times) < 50):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def write_gpt2_small(folder: Path, vocab: int = 50257, seed: int = 0) -> Path:
    """A GPT-2-small-shaped checkpoint (768 wide, 12 layers x 12 heads, 1024 positions), random."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    d, f, n_layer = 768, 3072, 12
    r = lambda *s: (rng.standard_normal(s, dtype=np.float32) * 0.02)  # noqa: E731
    t = {"wte.weight": r(vocab, d), "wpe.weight": r(1024, d),
         "ln_f.weight": np.ones(d, np.float32), "ln_f.bias": np.zeros(d, np.float32)}
    for i in range(n_layer):
        a = f"h.{i}."
        t.update({a + "ln_1.weight": np.ones(d, np.float32), a + "ln_1.bias": r(d),
                  a + "attn.c_attn.weight": r(d, 3 * d), a + "attn.c_attn.bias": r(3 * d),
                  a + "attn.c_proj.weight": r(d, d), a + "attn.c_proj.bias": r(d),
                  a + "ln_2.weight": np.ones(d, np.float32), a + "ln_2.bias": r(d),
                  a + "mlp.c_fc.weight": r(d, f), a + "mlp.c_fc.bias": r(f),
                  a + "mlp.c_proj.weight": r(f, d), a + "mlp.c_proj.bias": r(d)})
    folder.mkdir(parents=True, exist_ok=True)
    save_file(t, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "architectures": ["GPT2Model"], "n_embd": d, "n_head": 12,
        "n_layer": n_layer, "n_positions": 1024, "vocab_size": vocab, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}))
    return folder


def hf_runner(folder: Path, threads: int):
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        return None
    torch.set_num_threads(threads)
    model = AutoModel.from_pretrained(str(folder), attn_implementation="eager",
                                      dtype=torch.float32).eval()

    def run(ids):
        with torch.no_grad():
            x = torch.tensor([ids])
            out = model(input_ids=x, output_attentions=True)
            return out.attentions
    return run


def bench(label, folder, lengths, threads, vocab, rows):
    model = load_model(folder)
    hf = hf_runner(folder, threads)
    rng = np.random.default_rng(0)
    for T in lengths:
        ids = rng.integers(1000, vocab - 1, size=T).tolist()
        ours = median_time(lambda: model.run(ids=ids, request=RunRequest(use_cache=False)))  # a full forward every time, never a cache hit
        theirs = median_time(lambda: hf(ids)) if hf else None
        rows.append((label, T, ours, theirs))
        ratio = f"{ours / theirs:6.2f}" if theirs else "   n/a"
        hf_ms = f"{theirs * 1e3:9.1f}" if theirs else "      n/a"
        print(f"{label:<22} {T:>5} {ours * 1e3:11.1f} {hf_ms} {ratio}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the HF reference")
    ap.add_argument("--quick", action="store_true", help="smaller sizes only")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="cap attnviz's BLAS threads (the window uses 1); default: BLAS's own")
    args = ap.parse_args()
    if args.blas_threads:
        from threadpoolctl import threadpool_limits
        threadpool_limits(limits=args.blas_threads, user_api="blas")
        print(f"attnviz BLAS threads capped at {args.blas_threads}")
    print(f"{'model':<22} {'T':>5} {'attnviz ms':>11} {'HF ms':>9} {'ratio':>6}")
    rows: list = []
    minilm = resolve(DEFAULT_MODEL)[1]
    bench("all-MiniLM-L6-v2", minilm, [16, 64] if args.quick else [16, 64, 256, 512],
          args.threads, 30522, rows)
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_gpt2_small(Path(tmp) / "gpt2-small-random")
        bench("gpt2-small (random)", folder, [16, 64] if args.quick else [16, 64, 256, 1024],
              args.threads, 50257, rows)
    figures = [record.figure(f"{label} full forward, T = {T}", ours * 1e3, "ms", note="median")
               for label, T, ours, _ in rows]
    figures += [record.figure(f"{label} full forward, T = {T}: attnviz / HF eager", ours / theirs, "x",
                              goal=1.0, note=f"torch {args.threads} threads")
                for label, T, ours, theirs in rows if theirs]
    record.write("engine", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
