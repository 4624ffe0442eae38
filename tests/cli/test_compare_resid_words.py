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
