"""A command whose model file is cut short on disk after the command opened it says so in one line
and exits 2 (engine/reading/mapped_files.py), with no traceback, where its next read past the
file's new end would have ended the process (SIGBUS: run in a process of its own for that)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnviz.engine.reading.byte_sizes import format_bytes
from gguf_files import CHANGED_NAMES, tiny_gqa_files

ROOT = Path(__file__).resolve().parents[2]

# `attnviz ARGV` whose model file (argv[1]) is truncated as soon as the command has opened it
CUT_SHORT = """
import os, sys
from attnviz.engine.computing import load
opened = load.model_of

def cut_short(read):
    model = opened(read)
    os.truncate(sys.argv[1], 64)
    return model

load.model_of = cut_short
from attnviz.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("kind", ["gguf", "safetensors"])
def test_a_command_whose_model_file_is_cut_short_says_so_and_exits_2(tmp_path, kind):
    source, mapped = tiny_gqa_files(kind, tmp_path)
    size = mapped.stat().st_size
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", CUT_SHORT, str(mapped), "generate", "--model", str(source),
                           "--ids", "1,2,3,4", "--max-new", "3", "--ignore-eos"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"attnviz generate: error: {CHANGED_NAMES[kind]} changed on disk after attnviz opened it (it was "
        f"{format_bytes(size)}, it is 64 bytes now): open the model again to read the new file")
