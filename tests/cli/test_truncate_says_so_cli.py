"""--truncate says on stderr, in one line, when it cut the text and what was read, the closing
special token included; a text that fits is run with nothing said."""

import pytest

MINILM = ("--model", "all-MiniLM-L6-v2")  # 512 positions, [CLS] ... [SEP]
LONG = "the " * 600  # 602 tokens with [CLS] and [SEP]


def _argv(command, text, tmp_path):
    return {"attention": ("attention", *MINILM, "--text", text, "--out", str(tmp_path / "a.npz")),
            "heads": ("heads", *MINILM, "--text", text),
            "find": ("find", *MINILM, "--text", text, "--from", "the@2", "--to", "the@1"),
            "export": ("export", *MINILM, "--text", text, "--layer", "0", "--head", "0",
                       "--out", str(tmp_path / "h.npy"))}[command] + ("--truncate",)


@pytest.mark.parametrize("command", ["attention", "heads", "find", "export"])
def test_a_cut_text_is_said_in_one_line(command, cli, tmp_path):
    rc, _, err = cli(*_argv(command, LONG, tmp_path))
    assert rc == 0, err
    assert err == (f"attnviz {command}: note: the text is 602 tokens; read its first 511 tokens and "
                   "its closing [SEP] (--truncate)\n")


@pytest.mark.parametrize("command", ["attention", "heads", "find", "export"])
def test_a_text_that_fits_says_nothing(command, cli, tmp_path):
    rc, _, err = cli(*_argv(command, "the the the cat", tmp_path))
    assert rc == 0 and err == "", err
