"""The SmolLM2 benchmark's tables and figures (benchmarks/smollm2.py measures): the goals each
section is read against, the printed report of a run's results, and the figures it records."""

from __future__ import annotations

import statistics
from pathlib import Path

T_REUSED = 63  # the cached step: 63 tokens from the cache, 1 computed
GOALS = {"ratio_hf": 1.0, "cache_speedup": 5.0, "pass_ratio": 2.0, "rss_gib": 1.0,
         "typing_p95_ms": 60.0, "stall_ms": 16.0, "max_T": 64}


def _ok(cond) -> str:
    return "MET" if cond else "MISSED"


def report(res: dict) -> None:
    ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
    print()
    print(f"machine: {res['cpus']} CPUs, Python {res['python']}, numpy {res['numpy']}; "
          f"model {Path(res['gguf']).name}")
    ip = res["inprocess"]
    print(f"attnviz timed in a torch-free process on {res['child_python']} (BLAS threads via threadpoolctl: "
          f"{ip['threadpoolctl']}); HF on {res['executable']}: {ip['hf_note']}")
    if "max_abs_diff_vs_hf" in ip:
        print(f"patterns attnviz vs HF at T=16: max |diff| {ip['max_abs_diff_vs_hf']:.2e}")
    print()
    print("1. full forward, all 30 layers' patterns (median)")
    print(f"{'BLAS/torch threads':>18} {'T':>5} {'attnviz ms':>11} {'HF eager ms':>12} {'ratio':>7} "
          f"{'goal':>7}")
    for row in ip["settings"]:
        for f in row["forward"]:
            hf = ms(f["hf_s"]) if f["hf_s"] else "n/a"
            ratio = f"{f['ratio']:.2f}" if f["ratio"] else "n/a"
            verdict = _ok(f["ratio"] <= GOALS["ratio_hf"]) if f["ratio"] else ""
            print(f"{row['threads']:>18} {f['T']:>5} {ms(f['attnviz_s']):>11} {hf:>12} {ratio:>7} "
                  f"{'<= 1.0':>7} {verdict}")
    print()
    print("2. one appended token at T=64 with the KV cache (median over fresh prefixes)")
    print(f"{'threads':>7} {'step ms':>8} {'full ms':>8} {'speedup':>8} {'pass ms':>8} {'pass GB/s':>9} "
          f"{'step/pass':>9} {'read ms':>8} {'step/read':>9} {'computed':>9}")
    for row in ip["settings"]:
        c = row["cache"]
        read, by_read = (ms(c["read_s"]), f"{c['read_ratio']:.2f}x") if c.get("read_s") else ("-", "-")
        print(f"{row['threads']:>7} {ms(c['step_s']):>8} {ms(c['full_s']):>8} {c['speedup']:>7.1f}x "
              f"{ms(c['pass_s']):>8} {c['pass_gbps']:>9.1f} {c['pass_ratio']:>8.2f}x "
              f"{read:>8} {by_read:>9} {str(c['cache_computed']):>9}  "
              f"speedup {_ok(c['speedup'] >= GOALS['cache_speedup'])} (>= 5x), "
              f"step/pass {_ok(c['pass_ratio'] <= GOALS['pass_ratio'])} (<= 2x)")
        if c["cache_computed"] != [1] or c["cache_reused"] != [T_REUSED]:
            print(f"   CHECK FAILED at {row['threads']} threads: cache_computed {c['cache_computed']}, "
                  f"cache_reused {c['cache_reused']} (expected [1], [{T_REUSED}])")
    c0 = ip["settings"][0]["cache"]
    print(f"   pass = {c0['pass_mats']} matrix-vector products over {c0['pass_bytes'] / 2**20:.1f} MiB "
          f"of float32 weights (a reference, not a floor); read = one thread's plain read of the same "
          f"bytes (their read floor, at 1 thread only); KV cache held at T=64: "
          f"{c0['cache_bytes'] / 2**20:.2f} MiB; "
          f"step run() time vs its compute_s: {ms(c0['step_s'])} / {ms(c0['step_compute_s'])} ms")
    print()
    cold = res["cold"]
    print(f"3. cold start, fresh {res['child_python']} processes (median of {len(cold)}; per run in --json)")
    med = lambda k: statistics.median(c[k] for c in cold)  # noqa: E731
    print(f"   python up (spawn -> first line)     {ms(med('python_up_s')):>8} ms")
    print(f"   import numpy                        {ms(med('import_numpy_s')):>8} ms")
    print(f"   import gguf + tokenizers            {ms(med('import_gguf_tokenizers_s')):>8} ms")
    print(f"   import attnviz.engine (rest)        {ms(med('import_attnviz_engine_s')):>8} ms")
    print(f"   load_model(SmolLM2) total           {ms(med('load_model_s')):>8} ms")
    for k in cold[0]["steps"]:
        print(f"     {k:<34}{ms(statistics.median(c['steps'].get(k, 0.0) for c in cold)):>8} ms")
    print(f"     {'other (resolve, Model, ...)':<34}{ms(med('load_other_s')):>8} ms")
    print(f"   first forward, default sentence     {ms(med('first_forward_s')):>8} ms "
          f"(T={cold[0]['first_forward_T']}; a second, uncached: {ms(med('second_forward_s'))} ms)")
    print(f"   spawn -> first result               {ms(med('total_s')):>8} ms")
    for name, t in res["typing"].items():
        if t and t.get("cold"):
            runs = [c[0] for c in t["cold"]]
            print(f"   window, spawn -> first painted heatmaps, {name}: "
                  + ", ".join(f"{x:.2f}" for x in runs)
                  + f" s (best {min(runs):.2f}; typing_latency.py's goal <= 1.5 s: "
                  f"{_ok(min(runs) <= 1.5)})")
    print()
    m = res["rss"]
    gib = m["after_run"]["VmHWM"] / 2**30
    print(f"4. memory, fresh process: after import VmRSS {m['after_import']['VmRSS'] / 2**20:.0f} MiB, "
          f"after load {m['after_load']['VmRSS'] / 2**20:.0f} MiB, after T={m['T']} run "
          f"VmRSS {m['after_run']['VmRSS'] / 2**20:.0f} MiB, VmHWM {m['after_run']['VmHWM'] / 2**20:.0f} MiB "
          f"({gib:.3f} GiB; goal <= 1 GiB: {_ok(gib <= GOALS['rss_gib'])})")
    print()
    print("5. keystroke -> painted heatmaps in the window, one-layer view (benchmarks/typing_latency.py, "
          "1 BLAS thread, side panels calc+roles)")
    print(f"{'model / sentence':<34}{'keys':>5}{'max T':>6}{'p50 ms':>8}{'p95 ms':>8}{'max ms':>8}"
          f"{'engine p50':>11}{'stall ms':>9}")
    for name, t in res["typing"].items():
        if not t:
            print(f"{name:<34} failed")
            continue
        for r in t["rows"]:
            verdict = ""
            if name.startswith("SmolLM2"):
                verdict = (f"  p95 {_ok(r['p95'] * 1e3 <= GOALS['typing_p95_ms'])} (<= 60), "
                           f"stall {_ok(r['stall'] * 1e3 <= GOALS['stall_ms'])} (<= 16)")
            print(f"{name:<34}{r['keys']:>5}{r['max_T']:>6}{ms(r['p50']):>8}{ms(r['p95']):>8}"
                  f"{ms(r['max']):>8}"
                  f"{ms(r['compute_p50']):>11}{ms(r['stall']):>9}{verdict}")
    print()
    print("CPU time taken by other processes during each section (0 = the machine was ours):")
    for name, f in res["foreign"].items():
        busy = f["other_cpu_s"] > 0.05 * f["wall_s"]
        flag = "  <- contended: timings of this section are suspect" if busy else ""
        print(f"   {name:<36} {f['other_cpu_s']:6.1f} CPU-s over {f['wall_s']:6.1f} s{flag}")
    print(f"\ntotal benchmark time {res['elapsed_s']:.0f} s; load average (1, 5, 15 min) at start "
          f"{', '.join(f'{x:.2f}' for x in res['loadavg_start'])}, at end "
          f"{', '.join(f'{x:.2f}' for x in res['loadavg_end'])}")


def step_figures(threads: int, c: dict, record) -> list[dict]:
    """The cached step against one float32 pass over the model's layer matrices without the unembedding (its goal's reference, no
    floor) and, where measured (one thread), against the read floor of those bytes."""
    where = f"SmolLM2 cached step at T = 64, {threads} thread(s)"
    mib = c["pass_bytes"] / 2 ** 20
    out = [record.figure(
        f"{where}: against one float32 matrix-vector pass over the model's layer matrices without the unembedding (a reference, "
        "not a floor)", c["pass_ratio"], "x", goal=GOALS["pass_ratio"],
        note=f"{c['step_s'] * 1e3:.1f} ms a step; the pass {c['pass_s'] * 1e3:.1f} ms over "
             f"{mib:.0f} MiB ({c['pass_gbps']:.1f} GB/s), measured in the same run; medians")]
    if c.get("read_s"):
        out.append(record.figure(
            f"{where}: against the read floor of the model's float32 matrices", c["read_ratio"], "x",
            note=f"one thread's plain read of the same {mib:.0f} MiB (benchmarks/streaming.py), "
                 f"{c['read_s'] * 1e3:.1f} ms ({c['read_gbps']:.1f} GB/s), fastest of 9, measured "
                 "in the same run"))
    return out


def figures(res: dict, record) -> list[dict]:
    """The goals' figures: HF's eager ratio, the cached step against the float32 pass (and, at one
    thread, the read floor of the same bytes) and the full run,
    the load in a fresh process, and the peak RSS."""
    out = []
    for row in res["inprocess"]["settings"]:
        for f in row["forward"]:
            if f["ratio"]:
                out.append(record.figure(
                    f"SmolLM2 full forward at T = {f['T']}, {row['threads']} thread(s): attnviz / HF eager",
                    f["ratio"], "x", goal=GOALS["ratio_hf"], note="medians"))
        c = row["cache"]
        out += step_figures(row["threads"], c, record)
        out.append(record.figure(f"SmolLM2 cached step at T = 64, {row['threads']} thread(s): speed-up "
                                 "over the full run", c["speedup"], "x", goal=GOALS["cache_speedup"],
                                 goal_is="min"))
    loads = [c["load_model_s"] for c in res["cold"]]
    out.append(record.figure("SmolLM2 load_model in a fresh process", statistics.median(loads), "s",
                             runs=loads, headline=True, note=f"median of {len(loads)}"))
    gib = res["rss"]["after_run"]["VmHWM"] / 2 ** 30
    out.append(record.figure("SmolLM2 peak RSS after a run", gib, "GiB", goal=GOALS["rss_gib"]))
    return out
