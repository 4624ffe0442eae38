"""Memory-budget benchmark (not a test): a random-weight Llama-shaped GGUF of about 3B parameters
(Q4_0), run at T = 64 under memory budgets; reports the time to the first heatmaps and the RSS.

    .venv/bin/python -m benchmarks.budget [--dir DIR] [--budgets 2G,8G] [--T 64] [--keep]

The file: Llama 3.2 3B's shape (d_model 3072, 28 layers, 24 heads, 8 KV heads, d_ff 8192, a
128,256-token tied embedding: 3.21B parameters), every weight matrix drawn N(0, 0.02^2) and
quantised to Q4_0 with gguf.quants, norms F32, written with gguf.GGUFWriter one tensor at a time
into --dir (default: a temporary folder, removed afterwards unless --keep; an existing file of the
same shape there is reused). The free disk space is checked first. It has no tokenizer: the runs
take 64 random token ids.

Each budget runs in a fresh process: load_model(budget=...), the window's trial run over 3 ids
(ui/machinery/loading.load_checked: a pass over every layer), the first run over the T ids (every pattern
computed: the first heatmaps), then the same ids with one more token (the KV cache computes the
new row: a keystroke). Reported per budget: load, first run, load + first run (time to first
heatmaps; "window": with the trial run), the keystroke, layers kept, peak RSS (VmHWM, the file's
pages read in included), the goal RSS <= file size + budget + 0.5 GiB, the load average.
The file is in the page cache after it is written (no cold disk read in these figures).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.byte_sizes import format_bytes
from benchmarks import record

GIB = 1 << 30
SHAPE = dict(d_model=3072, n_layer=28, n_head=24, n_kv_head=8, d_ff=8192, vocab=128_256)


def n_params(s: dict) -> int:
    d, f, dh = s["d_model"], s["d_ff"], s["d_model"] // s["n_head"]
    dq, dkv = s["n_head"] * dh, s["n_kv_head"] * dh
    layer = d * (dq + 2 * dkv) + dq * d + 3 * d * f + 2 * d
    return s["n_layer"] * layer + s["vocab"] * d + d


def tensors(s: dict):
    """(name, [rows, cols] or [n], quantised) in file order."""
    d, f, dh = s["d_model"], s["d_ff"], s["d_model"] // s["n_head"]
    dq, dkv = s["n_head"] * dh, s["n_kv_head"] * dh
    yield "token_embd.weight", (s["vocab"], d), True
    for i in range(s["n_layer"]):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", (d,), False
        yield b + "attn_q.weight", (dq, d), True
        yield b + "attn_k.weight", (dkv, d), True
        yield b + "attn_v.weight", (dkv, d), True
        yield b + "attn_output.weight", (d, dq), True
        yield b + "ffn_norm.weight", (d,), False
        yield b + "ffn_gate.weight", (f, d), True
        yield b + "ffn_up.weight", (f, d), True
        yield b + "ffn_down.weight", (d, f), True
    yield "output_norm.weight", (d,), False


def write_model(path: Path, s: dict, seed: int = 0) -> None:
    import gguf
    import numpy as np
    from gguf import quants

    Q = gguf.GGMLQuantizationType.Q4_0
    block, type_size = gguf.GGML_QUANT_SIZES[Q]
    d, dh = s["d_model"], s["d_model"] // s["n_head"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(s["n_layer"])
    w.add_context_length(8192)
    w.add_embedding_length(d)
    w.add_feed_forward_length(s["d_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_kv_head"])
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(dh)
    w.add_vocab_size(s["vocab"])
    for name, shape, quant in tensors(s):
        if quant:
            w.add_tensor_info(name, (shape[0], shape[1] // block * type_size), np.dtype(np.uint8),
                              shape[0] * shape[1] // block * type_size, raw_dtype=Q)
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for name, shape, quant in tensors(s):
        if not quant:
            w.write_tensor_data(np.ones(shape, dtype=np.float32))
            continue
        rows = max(1, (1 << 24) // shape[1])  # 64 MiB of float32 at a time
        parts = []
        for a in range(0, shape[0], rows):
            x = rng.standard_normal((min(rows, shape[0] - a), shape[1]), dtype=np.float32)
            x *= np.float32(0.02)
            parts.append(quants.quantize(x, Q))
        w.write_tensor_data(np.concatenate(parts))
    w.close()


def child(path: str, budget: str, T: int) -> None:
    """One budget in this process: load, first run, keystroke; one JSON line."""
    import numpy as np

    from attnviz.engine import load_model
    from attnviz.engine.reading.memory_budget import parse_budget

    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    model = load_model(path, budget=parse_budget(budget))
    t1 = time.perf_counter()
    c = model.config
    ids = np.random.default_rng(1).integers(0, c.vocab_size, T + 1)
    model.run(ids=ids[:3], request=RunRequest(use_cache=False))  # the window's trial run (ui/machinery/loading.load_checked)
    t_trial = time.perf_counter() - t1
    t1 = time.perf_counter()
    r = model.run(ids=ids[:T])
    t2 = time.perf_counter()
    assert r.attentions.shape == (c.n_layer, c.n_head, T, T)
    assert np.isfinite(r.attentions).all()
    after_first = _status()
    k = model.run(ids=ids[:T + 1])
    t3 = time.perf_counter()
    assert k.cache_reused == T
    store = model.weights.layers
    print(json.dumps({
        "budget": budget, "load_s": t1 - t_trial - t0, "trial_s": t_trial, "first_run_s": t2 - t1,
        "first_heatmaps_s": t2 - t0 - t_trial, "window_first_heatmaps_s": t2 - t0,
        "keystroke_s": t3 - t2, "kept": store.kept, "n_layer": len(store),
        "expansions": store.expansions, "memory": model.memory,
        "load_average": [load_before, os.getloadavg()[0]],
        "rss_after_first": after_first["VmRSS"], **{k: v for k, v in _status().items()}}))


def _status() -> dict:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def no_room(folder, free: int, expect: int) -> str:
    """The refusal to write the file: the space free rounded down, what the file needs up."""
    return (f"not enough disk space in {folder}: {format_bytes(free, 'down')} free, the file needs "
            f"{format_bytes(expect, 'up')} (and 1 GiB to spare)")


def budget_lines(budget: str, r: dict, goal: int | None) -> tuple[str, str]:
    """One budget's row of the table and the line under it, sizes as the app writes them (the
    goal, a limit, rounded down; the JSON line after them keeps the exact bytes)."""
    ok = "" if goal is None else ("yes" if r["VmHWM"] <= goal else "NO")
    goal_cell = "" if goal is None else format_bytes(goal, "down")
    row = (f"{budget:>7} {r['load_s']:7.1f} {r['first_run_s']:7.1f} {r['first_heatmaps_s']:8.1f} "
           f"{r['window_first_heatmaps_s']:9.1f} {r['keystroke_s']:7.1f} {r['kept']:>3}/{r['n_layer']:<2} "
           f"{format_bytes(r['VmHWM']):>9} {goal_cell:>9}  {ok}")
    detail = (f"        load average {r['load_average'][0]:.2f} before, {r['load_average'][1]:.2f} after; "
              f"{r['memory']}; RSS after the first run {format_bytes(r['rss_after_first'])} "
              f"(anonymous {format_bytes(r['RssAnon'])}, file {format_bytes(r['RssFile'])} at the end); "
              f"{r['expansions']} layer expansions in all")
    return row, detail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="where the GGUF is written (default: a temporary folder)")
    ap.add_argument("--budgets", default="2G,8G", help="comma list of budgets (2G, 8G; auto: the default)")
    ap.add_argument("--T", type=int, default=64)
    ap.add_argument("--keep", action="store_true", help="keep the file (with --dir)")
    ap.add_argument("--small", action="store_true", help="a 4-layer model of d_model 256: a smoke test")
    ap.add_argument("--child", nargs=2, metavar=("PATH", "BUDGET"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1], args.T)
        return 0
    folder = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="attnviz-budget-"))
    folder.mkdir(parents=True, exist_ok=True)
    s = SHAPE if not args.small else dict(d_model=256, n_layer=4, n_head=4, n_kv_head=2, d_ff=512,
                                          vocab=1000)
    name = "random-llama-{d_model}x{n_layer}-ff{d_ff}-v{vocab}.Q4_0.gguf".format(**s)
    path = folder / name
    params = n_params(s)
    expect = int(params * 18 / 32) + (1 << 20)
    try:
        if not path.exists() or path.stat().st_size < expect - (1 << 20):
            free = shutil.disk_usage(folder).free
            if free < expect + GIB:
                print(no_room(folder, free, expect), file=sys.stderr)
                return 2
            t = time.perf_counter()
            write_model(path, s)
            print(f"wrote {path} ({format_bytes(path.stat().st_size)}) in {time.perf_counter() - t:.0f} s")
        size = path.stat().st_size
        print(f"file: {params / 1e9:.2f}B parameters, Q4_0, {format_bytes(size)} ({size:,} bytes); "
              f"T = {args.T}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
        print(f"{'budget':>7} {'load s':>7} {'run s':>7} {'first s':>8} {'window s':>9} {'key s':>7} "
              f"{'kept':>6} {'peak RSS':>9} {'goal':>9}  ok")
        figures = []
        for budget in args.budgets.split(","):
            out = subprocess.run([sys.executable, __file__, "--child", str(path), budget, "--T",
                                  str(args.T)], capture_output=True, text=True)
            if out.returncode:
                print(f"{budget:>7} failed: {out.stderr.strip().splitlines()[-1:]}")
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            from attnviz.engine.reading.memory_budget import parse_budget

            b = parse_budget(budget)
            goal = size + b + GIB // 2 if b is not None else None
            print("\n".join(budget_lines(budget, r, goal)))
            print("        json " + json.dumps(r))
            figures += [
                record.figure(f"budget {budget}: peak RSS, a 3.2B Q4_0 model", r["VmHWM"] / GIB, "GiB",
                              goal=None if goal is None else goal / GIB, headline=True,
                              note=f"goal: the file + the budget + 0.5 GiB; T = {args.T}"),
                record.figure(f"budget {budget}: load to the first heatmaps (engine)",
                              r["first_heatmaps_s"], "s", note=f"{r['kept']} of {r['n_layer']} layers kept"),
                record.figure(f"budget {budget}: a keystroke (1 token, KV cache)", r["keystroke_s"], "s")]
        record.write("budget", figures)
    finally:
        if not args.keep and not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
