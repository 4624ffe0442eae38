"""`attnviz export --value-weighted`: the numbers of the window's Value-weighted view."""

import numpy as np

from attnviz.cli import main
from attnviz.engine.computing.patterns import value_weighted
from attnviz.engine.computing.request import RunRequest

SENTENCE = "The keys to the cabinet are on the table."


def test_cli_export_value_weighted_writes_the_weighted_numbers(minilm, tmp_path, capsys):
    out = tmp_path / "l2.npy"
    assert main(["export", "--model", "all-MiniLM-L6-v2", "--text", SENTENCE, "--layer", "2", "--value-weighted",
                 "--out", str(out)]) == 0
    r = minilm.run(SENTENCE, request=RunRequest(values=True))
    np.testing.assert_allclose(np.load(out), value_weighted(r.attentions[2], r.value_norms[2]), rtol=1e-5)
    assert main(["export", "--view", "anatomy", "--value-weighted", "--out", str(tmp_path / "a.png")]) != 0
    assert "--value-weighted applies to heatmaps" in capsys.readouterr().err
