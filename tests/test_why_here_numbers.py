"""docs/why-here.md's "What it finds" numbers are docs/why_here_findings.json's, each rounded once
from the value as measured: the script writes the values unrounded, so a number the page shows at
3 decimals is never a 4-decimal number rounded again (0.29146 reads 0.291, not 0.2915 -> 0.292)."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "why-here.md").read_text(encoding="utf-8")
FOUND = json.loads((ROOT / "docs" / "why_here_findings.json").read_text(encoding="utf-8"))


def signed(v: float, d: int) -> str:  # the page's sign: a + on parts, a minus sign below 0
    return f"{v:+.{d}f}".replace("-", "\u2212")


def floats(doc):
    if isinstance(doc, dict):
        for v in doc.values():
            yield from floats(v)
    elif isinstance(doc, list):
        for v in doc:
            yield from floats(v)
    elif isinstance(doc, float):
        yield doc


def test_the_findings_are_kept_as_measured_not_rounded():
    kept = [v for v in floats(FOUND) if v != int(v)]
    assert kept and not [v for v in kept if round(v, 4) == v], "a value rounded to 4 decimals"


def test_the_smollm2_numbers_on_the_page_are_the_findings():
    s = FOUND["smollm2"]
    key = {r["component"]: r for r in s["key_side"]}
    query = s["query_side"]
    ind = s["induction_copying"]
    top = s["key_side_top_head"]
    said = [
        f"**{s['head']}**, with induction strength {s['induction_strength']:.3f}.",
        f"The head puts weight {s['weight']:.3f} there, and\n  the score is {s['score']:.2f}; the table "
        f"sums to {s['table_sum']:.2f}.",
        f"**L16H0** contributes {signed(key['L16H0']['value'], 2)}, {key['L16H0']['share'] * 100:.0f} % of the",
        f"strength {key['L16H0']['previous_strength']:.3f})",
        f"L17H8 {signed(key['L17H8']['value'], 2)} (mixed, previous-token\n  strength "
        f"{key['L17H8']['previous_strength']:.2f}), L1.mlp {signed(key['L1.mlp']['value'], 2)}, L3H2 "
        f"{signed(key['L3H2']['value'], 2)}, L13.mlp {signed(key['L13.mlp']['value'], 2)}.",
        f"into {s['head']} is {top['k_composition']:.3f}, the {top['k_composition_rank']}nd highest of the "
        f"{top['earlier_heads']} earlier heads",
        ": " + ", ".join(f"{r['component']}{chr(10) + '  ' if r['component'] == 'L1H0' else ' '}"
                         f"{signed(r['value'], 2)}" for r in query) + ".",
        f"OV copying score is **{s['copying']:.3f}**.",
        "ranks 4th: " + ", ".join(f"{h} {v:.3f}".replace("-", "\u2212") for h, v in ind.items()),
        f"heads it ranks {s['copying_rank_among_all']}th; SmolLM2's heads range from "
        f"{s['copying_min']:.3f} to {s['copying_max']:.3f}.".replace("-", "\u2212"),
        f"{s['k_composition_best']['head']} ({s['k_composition_best']['value']:.3f})",
    ]
    assert s["copying_rank_among_induction"] == 4 and top["k_composition_rank"] == 2
    for text in said:
        assert text in PAGE, text


def test_the_toy_table_is_the_findings():
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", PAGE, flags=re.M)
    assert len(rows) >= 10
    for checkpoint, rest in rows:
        t = FOUND["toy"][int(checkpoint)]
        top = t["key_side_top_head"]
        part = None if top is None else next(r for r in t["key_side"] if r["component"] == top["component"])
        want = [str(t["step"]), t["head"],
                f"{t['induction_strength']:.2f}" + ("" if t["claimed"] else " (not cleared)"),
                "none" if top is None else f"{top['component']} ({part['share'] * 100:.0f} %)",
                "-" if top is None else f"{part['previous_strength']:.2f} ({part['role']})",
                "-" if top is None else f"{top['k_composition_rank']} of {top['earlier_heads']}",
                f"{t['copying']:.3f}"]
        assert rest.split(" | ") == want, (checkpoint, rest)


def test_the_toy_prose_numbers_are_the_findings():
    toy = {t["step"]: t for t in FOUND["toy"]}
    last = toy[2000]
    cleared = last["induction_copying"].values()
    said = [f"all score between {min(cleared):.3f} and {max(cleared):.3f}\n  ({last['head']}: {last['copying']:.4f})",
            f"score between {toy[0]['copying_min']:.2f} and {toy[0]['copying_max']:.2f}".replace("-", "\u2212"),
            f"all 16 score between {toy[200]['copying_min']:.2f} and {toy[200]['copying_max']:.2f}",
            f"the lowest falls to {toy[1260]['copying_min']:.2f} at step 1260 and to "
            f"{last['copying_min']:.2f} at step".replace("-", "\u2212")]
    assert len(cleared) == last["induction_heads"] == 6
    for text in said:
        assert text in PAGE, text
