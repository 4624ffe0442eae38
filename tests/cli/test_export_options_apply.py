"""`attnviz export` refuses the What heads do options (--ablate, --ablate-mode, --position,
--target, --alt) where they change nothing: a heatmap or the anatomy written without the heads
asked to be switched off would be the clean patterns under a name the user chose for a changed run."""

import pytest


@pytest.mark.parametrize("extra", [["--ablate", "0.0"], ["--ablate-mode", "mean"], ["--position", "2"],
                                   ["--target", "cat"], ["--alt", "mat"]])
def test_a_heatmap_export_refuses_the_what_heads_do_options(cli, tmp_path, extra):
    out = tmp_path / "h.csv"
    rc, _, err = cli("export", "--model", "attnviz-textbook", *extra, "--out", str(out))
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"{extra[0]} applies only to --view prediction, lens and dla, not to heatmaps" in err
    assert not out.exists()


def test_the_anatomy_refuses_them_too(cli, tmp_path):
    rc, _, err = cli("export", "--model", "attnviz-textbook", "--view", "anatomy", "--ablate", "0.1",
                     "--out", str(tmp_path / "a.png"))
    assert rc == 2 and "--ablate applies only to --view prediction, lens and dla, not to --view anatomy" in err


def test_the_dla_export_still_takes_them(cli, tmp_path):
    rc, out, _ = cli("export", "--model", "attnviz-textbook", "--view", "dla", "--ablate", "0.1",
                     "--ablate-mode", "mean", "--out", str(tmp_path / "d.json"))
    assert rc == 0 and "mean-ablated L0 H1" in out, out
