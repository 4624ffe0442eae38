"""The "What it finds" table of docs/compare.md: each bundled model against its quantized twins,
through the same code as `attnviz compare` (commands/compare_cmd.compare_report).

    python scripts/compare_findings.py [--out docs/compare_findings.json]

Prints the Markdown table; --out also writes every case's whole document (JSON)."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from attnviz.commands.compare_cmd import compare_report
from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.samples import SAMPLES
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.computing.quantized import quantized_model
from attnviz.engine.reading.registry import TOY_MODEL, WINDOW_MODEL
from attnviz.engine.computing.request import RunRequest

NAMES = next(s.text for s in SAMPLES if s.title.startswith("Made-up names"))
CASES = (  # (model, types, source): source "probe" or a text
    (TOY_MODEL, ("Q8_0", "Q5_1", "Q4_0"), "probe"),
    (WINDOW_MODEL, ("Q8_0", "Q4_0"), NAMES),
    ("all-MiniLM-L6-v2", ("Q4_0",), "probe"),
)


def run_case(a, qtype: str, source: str) -> dict:
    b = quantized_model(a, qtype)
    ids = C.induction_probe(a) if source == "probe" else a.run(source,
                                                               request=RunRequest(use_cache=False, layers=1)).input_ids.tolist()
    tokens = list(a.run(ids=ids, request=RunRequest(use_cache=False, layers=1)).tokens)
    ident = {"name": f"{a.name} quantized to {qtype}"}
    return compare_report(a, b, ids, tokens, {"name": a.name}, ident, probe_run=source == "probe")


def row(a_name: str, qtype: str, source: str, doc: dict) -> str:
    jsd = np.asarray(doc["heads_jsd"])
    moved = ", ".join(f"{head_title(l, h)} {v:.2g}" for l, h, v in C.moved_most(jsd, 3)) or "none (every JSD 0)"
    ind = doc["induction"]
    n = len(ind["survived"]) + len(ind["lost"])
    if doc["kld_stats"] is None:
        kld = top1 = "none (encoder)"
    else:
        s = doc["kld_stats"]
        kld = f"{s['mean']:.2g} / {s['median']:.2g} / {s['p99']:.2g} / {s['max']:.2g}"
        top1 = f"{doc['same_top1']:.1%}"
    what = "probe" if source == "probe" else "made-up names"
    return (f"| {a_name} | {qtype} | {what} ({len(doc['tokens'])}) | {jsd.mean():.2g} | {moved} | {kld} "
            f"| {top1} | {len(ind['lost'])} of {n} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    args = ap.parse_args()
    print("| A | B = A as | tokens | mean JSD (bits) | moved most (JSD) | KLD mean / median / p99 / max "
          "(nats) | same top-1 | induction heads lost |")
    print("|---|---|---|---|---|---|---|---|")
    docs = {}
    for name, types, source in CASES:
        a = load_model(name)
        for qtype in types:
            t0 = time.perf_counter()
            doc = run_case(a, qtype, source)
            doc["seconds"] = time.perf_counter() - t0
            docs[f"{a.name} {qtype}"] = doc
            print(row(a.name, qtype, source, doc), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(docs, f)


if __name__ == "__main__":
    main()
