"""`attnviz export` never destroys what was there, as tests/figures/test_export_atomic.py
checks for the writer: a failed export from the command line is one line on stderr and leaves the
folder exactly as it was; a successful one replaces the file."""

import errno

import pytest

from attnviz.figures import data as export_data
from export_files import SENTENCE, half_then, old_pair, snapshot

# the model of `pair`'s earlier export (these tests are about the files, not the default model)
MINILM = ("--model", "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def run(minilm):
    return minilm.run(SENTENCE)


@pytest.fixture
def pair(qapp, run, tmp_path):
    """tmp_path with an earlier export fig.png + fig.png.json (head 0) and an unrelated file."""
    return old_pair(run, tmp_path)


def test_cli_sidecar_is_a_folder(pair, capsys):
    from attnviz.cli import main

    (pair / "fig.png.json").unlink()
    (pair / "fig.png.json").mkdir()
    before = snapshot(pair)
    code = main(["export", *MINILM, "--text", SENTENCE, "--layer", "0", "--head", "1", "--width", "500",
                 "--out", str(pair / "fig.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1, err
    assert f"cannot write {pair / 'fig.png.json'}: it is a folder, not a file" in err[0]
    assert "Errno" not in err[0]
    assert snapshot(pair) == before


def test_cli_numbers_over_an_existing_file_interrupted(pair, capsys, monkeypatch):
    from attnviz.cli import main

    (pair / "n.csv").write_text("old numbers\n")
    before = snapshot(pair)
    monkeypatch.setattr(export_data, "write_all",
                        half_then(OSError(errno.ENOSPC, "No space left on device"), 1))
    code = main(["export", *MINILM, "--text", SENTENCE, "--out", str(pair / "n.csv")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "n.csv: no space left on device" in err[0], err
    assert snapshot(pair) == before
    monkeypatch.undo()
    assert main(["export", *MINILM, "--text", SENTENCE, "--out", str(pair / "n.csv")]) == 0
    assert (pair / "n.csv").read_text().startswith("layer,head,query_pos")
    assert sorted(snapshot(pair)) == sorted(before)
