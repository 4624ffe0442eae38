"""--json outputs and .json files are strict JSON: a NaN or an infinity is written as null, never as
NaN / Infinity, which JSON does not have and strict parsers (JavaScript's JSON.parse, jq) refuse."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np

from attnviz.engine.reading.json_text import dumps

TB = ["--model", "attnviz-textbook"]


def strict(text: str):
    def refuse(name):
        raise AssertionError(f"{name} in the JSON text")
    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_are_written_as_null_and_the_rest_as_json_writes_them():
    doc = {"a": [1.5, float("nan"), (float("inf"), -np.inf)], "b": {"c": np.float32("nan"), "d": 2},
           "e": "NaN", "f": np.float64(0.25)}
    assert strict(dumps(doc)) == {"a": [1.5, None, [None, None]], "b": {"c": None, "d": 2},
                                  "e": "NaN", "f": 0.25}
    finite = {"x": [0.1, 2, None, "Infinity"], "y": math.pi}
    assert dumps(finite, indent=1) == json.dumps(finite, indent=1)


def test_compare_json_and_its_json_file_write_an_undefined_number_as_null(cli, monkeypatch, tmp_path):
    """A cosine that came out NaN (a residual stream that overflowed) and a KL that is infinite."""
    from attnviz.engine.analysing import compare as C

    real = C.compare

    def broken(*args, **kw):
        doc = real(*args, **kw)
        doc["resid_cos"][0] = float("nan")
        doc["heads_jsd"][0][0] = np.float64("inf")
        return doc
    monkeypatch.setattr(C, "compare", broken)
    out = tmp_path / "c.json"
    rc, stdout, err = cli("compare", *TB, "--against", "attnviz-textbook", "--text", "the cat",
                          "--json", "--out", str(out))
    assert rc == 0, err
    for doc in (strict(stdout), strict(out.read_text(encoding="utf-8"))):
        assert doc["resid_cos"][0] is None and doc["heads_jsd"][0][0] is None
        assert doc["resid_cos"][1] == 1.0


def test_every_json_text_is_written_through_the_strict_writer():
    """json.dumps writes NaN by default: each command, figure and export calls json_text.dumps."""
    root = Path(__file__).resolve().parents[2] / "attnviz"
    found = [f"{p.relative_to(root)}:{n}" for p in root.rglob("*.py") if p.name != "json_text.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\bjson\.dumps\(", line)]
    assert found == []
