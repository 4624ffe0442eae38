"""Fixtures of the command-line tests: a command run in this process, and the tiny text decoder."""

import pytest

from tiny import tiny_text_decoder


@pytest.fixture(autouse=True)
def _application_first(qapp):
    """The session's QApplication, made before any command runs in this process: an export would
    otherwise leave a QGuiApplication, and a widget test after it in the same process aborts."""


@pytest.fixture
def cli(capsys):
    """`attnviz ARGV` run in this process: (exit status, stdout, stderr). argparse's usage errors
    and --version raise SystemExit through it, as from main."""
    from attnviz.cli import main

    def run(*argv):
        rc = main(list(argv))
        out, err = capsys.readouterr()
        return rc, out, err

    return run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny Llama-family decoder with a byte-level tokenizer and an LM head (a folder's path)."""
    return str(tiny_text_decoder(tmp_path_factory.mktemp("tiny")))
