"""`attnviz compare`'s report states the residual stream's drift in the words the Compare panel's
summary shows (engine/analysing/compare.resid_drift), of the numbers its --json writes."""

import json

from attnviz.engine.analysing.compare import resid_drift

TOY = "attnviz-toy-stdlib"
TEXT = "def add(a, b): return a + b"


def test_the_report_and_the_panel_write_the_residual_cosine_alike(cli):
    rc, out, _ = cli("compare", "--model", TOY, "--quantize", "Q4_0", "--text", TEXT, "--json")
    assert rc == 0
    cos = json.loads(out)["resid_cos"]
    assert min(cos) < 0.9999995  # (a drift to write: not 1.000000)
    rc, out, _ = cli("compare", "--model", TOY, "--quantize", "Q4_0", "--text", TEXT)
    assert rc == 0
    assert resid_drift(cos) in out.splitlines()


def test_the_report_writes_the_drift_through_the_engines_words(cli, monkeypatch):
    """One source: the report's line is compare.resid_drift's, whatever that writes."""
    from attnviz.engine.analysing import compare

    monkeypatch.setattr(compare, "resid_drift", lambda cos: f"drift of {len(cos)} blocks")
    rc, out, _ = cli("compare", "--model", TOY, "--quantize", "Q4_0", "--text", TEXT)
    assert rc == 0
    assert "drift of " in out and "residual stream cosine" not in out
