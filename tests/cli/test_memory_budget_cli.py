"""`--memory-budget SIZE`, after a command or before it: the model keeps that much expanded and
the patterns written are the same bits as without it; a size that is not one, or less than one
layer, or a bare number below 1 MiB (512: bytes, when 512M was meant), is refused in one line
(exit 2)."""

import numpy as np
import pytest

from attnviz.cli import main
from attnviz.engine.reading import memory_budget as MB
from tiny import FIXTURES

IDS = "3,1,4,1,5,9,2,6,5,3,5,8,9,7"


@pytest.fixture(autouse=True)
def _default_budget():
    yield
    MB.set_memory_budget(None)


def _attention(tmp_path, *flags):
    out = tmp_path / f"a{len(list(tmp_path.iterdir()))}.npz"
    args = ["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", IDS, "--out", str(out)]
    n = flags.index("attention") if "attention" in flags else None
    argv = [*flags[:n], *args, *flags[n + 1:]] if n is not None else [*args, *flags]
    assert main(argv) == 0
    return np.load(out, allow_pickle=False)["attentions"]


def test_memory_budget_gives_the_same_patterns(tmp_path):
    want = _attention(tmp_path)
    # llama_gqa's layers are 78,336 bytes as float32: 100K holds one of its two at a time
    for flags in (("--memory-budget", "100K"), ("--memory-budget", "100K", "attention")):
        np.testing.assert_array_equal(_attention(tmp_path, *flags), want)
        assert MB.chosen_budget() == 100 << 10


@pytest.mark.parametrize("size, message", [("2X", "is not a size"), ("1K", "less than one layer"),
                                           ("512", "would be 512 bytes: type 512M for megabytes")])
def test_bad_memory_budget_is_refused_in_one_line(tmp_path, capsys, size, message):
    argv = ["attention", "--model", str(FIXTURES / "llama_gqa"), "--ids", IDS, "--out",
            str(tmp_path / "a.npz"), "--memory-budget", size]
    refused_by_argparse = size != "1K"
    with pytest.raises(SystemExit) if refused_by_argparse else _no_raise() as exit_:
        code = main(argv)
    code = exit_.value.code if refused_by_argparse else code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "a.npz").exists()


class _no_raise:
    value = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
