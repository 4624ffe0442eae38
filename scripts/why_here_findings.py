"""Measure what QK attribution and the circuit scores find on SmolLM2 and on the toy decoder
across its training checkpoints (docs/why-here.md, "What it finds"). Prints JSON.

    python scripts/why_here_findings.py > docs/why_here_findings.json

SmolLM2: the made-up-names sample (engine/analysing/samples.py) is run; the strongest head the
roles panel's scores label induction (heads.score_result, cleared("induction")) is taken, and at
the query in the second mention where that head puts the most weight on an induction key (the
token after the first copy of the current token), its score is split by QK attribution. The key
side's largest components are listed with their own role labels on this text and their
previous-token strength. Copying scores are ranked across every head cleared as induction.
The toy decoder: the same for each checkpoint on the repeated-random probe.

Values are written as measured, unrounded: the page rounds each one once (a value kept at 4
decimals and rounded again to 3 can be off by one in the last place: 0.29146 -> 0.2915 -> 0.292)."""

from __future__ import annotations

import json
import sys

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C, head_patterns as HP, heads as H, qk as Q
from attnviz.engine.analysing.probes import run_probe
from attnviz.engine.analysing.samples import SAMPLES
from attnviz.engine.computing.checkpoints import load_checkpoints
from attnviz.engine.reading.registry import TOY_MODEL
from attnviz.engine.computing.request import RunRequest

SMOLLM2 = "SmolLM2-135M-Instruct"
SAMPLE = next(s for s in SAMPLES if s.title.startswith("Made-up names"))


def induction_cell(result, layer, head):
    """(query, key) of the induction cell the head weights most: key = the token after an earlier
    copy of the query's token."""
    D = HP.induction_pattern(result.input_ids)  # [T, T] bool
    a = np.where(D, result.attentions[layer, head], -1.0)
    q, k = np.unravel_index(int(np.argmax(a)), a.shape)
    return int(q), int(k), float(result.attentions[layer, head, q, k])


def explain(model, text=None, ids=None, copying=None, n_side=5):
    trace = Q.qk_trace()
    result = model.run(text, trace=trace, request=RunRequest(use_cache=False)) if ids is None else \
        model.run(ids=ids, trace=trace, request=RunRequest(use_cache=False))
    hs = H.score_result(result, unknown_ids=H.unknown_token_ids(model))
    cleared = hs.cleared("induction")
    l, h, strength = cleared[0] if cleared else hs.best_strength("induction")
    q, k, weight = induction_cell(result, l, h)
    a = Q.qk_attribution(model, result.trace, l, h, q, k)
    copying = C.copying_scores(model) if copying is None else copying

    def part(name, value):
        row = {"component": name, "value": float(value), "share": float(value / a.score)}
        if name.startswith("L") and "H" in name:
            i, j = map(int, name[1:].split("H"))
            row["role"] = hs.labels[i][j]
            row["previous_strength"] = float(hs.strength["previous"][i, j])
        return row

    def side(values):
        order = np.argsort(-np.abs(values))[:n_side]
        return [part(a.components[i], float(values[i])) for i in order]

    comp = C.composition_scores(model)["k"][:, :, l, h]  # [n_layer, n_head]: earlier heads -> (l, h)
    top_head = next((r for r in side(a.key_side) if "role" in r), None)
    if top_head is not None:
        i, j = map(int, top_head["component"][1:].split("H"))
        top_head = {"component": top_head["component"], "k_composition": float(comp[i, j]),
                    "k_composition_rank": int((comp > comp[i, j]).sum()) + 1,
                    "earlier_heads": int(l * comp.shape[1])}
    best = np.unravel_index(int(np.argmax(comp)), comp.shape) if l else None
    ind = [(i, j) for i, j, _ in cleared]
    ranked = sorted(ind, key=lambda t: -copying[t])
    return {
        "head": f"L{l}H{h}", "induction_strength": float(strength), "claimed": bool(cleared),
        "query": q, "key": k, "query_token": result.tokens[q], "key_token": result.tokens[k],
        "weight": float(weight), "score": float(a.score), "table_sum": float(a.total()),
        "key_side": side(a.key_side), "key_side_top_head": top_head,
        "k_composition_best": None if best is None else
        {"head": f"L{best[0]}H{best[1]}", "value": float(comp[best])}, "query_side": side(a.query_side),
        "copying": float(copying[l, h]),
        "induction_heads": len(ind),
        "copying_rank_among_induction": (ranked.index((l, h)) + 1) if (l, h) in ind else None,
        "induction_copying": {f"L{i}H{j}": float(copying[i, j]) for i, j in ranked},
        "copying_rank_among_all": int((copying > copying[l, h]).sum()) + 1,
        "copying_min": float(copying.min()), "copying_max": float(copying.max()),
        "n_heads": int(copying.size),
    }


def main():
    smol = load_model(SMOLLM2)
    out = {"smollm2": explain(smol, SAMPLE.text), "toy": []}
    cks = load_checkpoints(load_model(TOY_MODEL))
    for i, info in enumerate(cks.infos):
        m = cks.model(i)
        res, _ = run_probe(m)
        row = explain(m, ids=res.input_ids.tolist())
        out["toy"].append({"checkpoint": i, "step": info.step, **row})
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
