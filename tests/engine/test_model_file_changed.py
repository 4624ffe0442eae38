"""A model file changed on disk while attnviz has the model open (engine/reading/mapped_files.py):
truncated or rewritten in place, whatever reads the weights next (a run, a cached run, the
prediction head, a generation, an analysis) is refused in one line naming the file, in place of a
crash (SIGBUS: a read past the file's new end) or numbers from a mix of old and new bytes. Replaced
whole by a rename, the model goes on reading the file it opened, as it was. A GGUF file and a
safetensors folder each."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.circuits import head_matrices
from attnviz.engine.computing.generate import generate
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.errors import ModelFileChanged, ModelLoadError
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.mapped_files import changed_message
from gguf_files import CHANGED_NAMES, spm_model, tiny_gqa_files
from tiny import rewrite_in_place

ROOT = Path(__file__).resolve().parents[2]
IDS, OTHER = [1, 2, 3, 4], [5, 6, 7, 8, 9]  # (OTHER: embedding rows the first run did not read)
FRESH = RunRequest(use_cache=False)
KINDS = ("gguf", "safetensors")

TRUNCATE = """
import os, sys
from attnviz.engine import load_model
from attnviz.engine.errors import ModelFileChanged
model = load_model(sys.argv[1])
model.run(ids=[1, 2, 3, 4])
os.truncate(sys.argv[2], 64)
try:
    model.run(ids=[5, 6, 7, 8, 9])
except ModelFileChanged as exc:
    print(exc)
"""


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_truncated_under_an_open_model_is_refused_not_a_crash(tmp_path, kind):
    """(In a process of its own: a read past the new end would end it, SIGBUS.)"""
    source, mapped = tiny_gqa_files(kind, tmp_path)
    size = mapped.stat().st_size
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", TRUNCATE, str(source), str(mapped)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.splitlines()[-1] == (
        f"{CHANGED_NAMES[kind]} changed on disk after attnviz opened it (it was {format_bytes(size)}, it is "
        "64 bytes now): open the model again to read the new file")


VOCABULARY = """
import os, sys
from attnviz.engine import load_model
from attnviz.engine.errors import ModelFileChanged
model = load_model(sys.argv[1], text="Hello world")  # (a vocabulary built for this text only)
model.run("Hello world")
os.truncate(sys.argv[1], 64)
print(model.labels([1, 2, 3]))
for read in (lambda: model.run("zebra quokka xylophone"), lambda: model.tokenizer.raw):
    try:
        read()
    except ModelFileChanged as exc:
        print(exc)
"""


def test_a_gguf_cut_short_is_refused_by_its_tokenizer_not_a_crash(tmp_path):
    """A GGUF's vocabulary is read from its file: a new text (its own tokens, or the whole
    vocabulary) and the labels of ids after the file was cut short, in a process of its own."""
    path = spm_model(tmp_path / "spm.gguf")
    size = path.stat().st_size
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", VOCABULARY, str(path)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    said = (f"{path.name} changed on disk after attnviz opened it (it was {format_bytes(size)}, it is "
            "64 bytes now): open the model again to read the new file")
    assert proc.stdout.splitlines() == ["['<s>', '</s>', '<00>']", said, said]


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_rewritten_in_place_is_refused_by_whatever_reads_it_next(tmp_path, kind):
    source, mapped = tiny_gqa_files(kind, tmp_path)
    model = load_model(source)
    model.run(ids=IDS)
    model.lm_head()
    size = mapped.stat().st_size
    mtime = rewrite_in_place(mapped)
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime // 1_000_000_000))
    said = (f"{CHANGED_NAMES[kind]} changed on disk after attnviz opened it (its size is the same, "
            f"{format_bytes(size)}, but its modification time changed to {when}): open the model "
            "again to read the new file")
    reads = {"a run": lambda: model.run(ids=OTHER),
             "a cached run": lambda: model.run(ids=IDS),
             "a run in full": lambda: model.run(ids=IDS, request=FRESH),
             "the head": model.lm_head,
             "a generation": lambda: generate(model, ids=IDS, max_new=2, ignore_eos=True),
             "an analysis": lambda: head_matrices(model, 0)}
    for what, read in reads.items():
        with pytest.raises(ModelFileChanged) as err:
            read()
        assert str(err.value) == said, what
    assert isinstance(err.value, ModelLoadError)  # (shown as every file refusal is)


@pytest.mark.parametrize("kind", KINDS)
def test_a_file_replaced_by_a_rename_is_read_as_it_was_opened(tmp_path, kind):
    source, mapped = tiny_gqa_files(kind, tmp_path)
    model = load_model(source)
    before = model.run(ids=OTHER, request=FRESH).attentions
    new = mapped.with_name("download.part")
    new.write_bytes(b"\0" * 64)  # (another file entirely: the map reads the one opened)
    os.replace(new, mapped)
    np.testing.assert_array_equal(model.run(ids=OTHER, request=FRESH).attentions, before)
    assert len(generate(model, ids=IDS, max_new=2, ignore_eos=True).new_ids) == 2


def test_sizes_that_read_the_same_rounded_are_given_to_the_byte():
    said = changed_message("m.gguf", 92_480_000, 92_480_004, 0)
    assert "(it was 92,480,000 bytes, it is 92,480,004 bytes now)" in said
    assert "(it was 88.2 MiB, it is 12 MiB now)" in changed_message(
        "m.gguf", round(88.2 * 2 ** 20), 12 * 2 ** 20, 0)


EXITING = """
import sys, threading
from attnviz.engine import load_model
model = load_model(sys.argv[1])
started = threading.Event()
def read():
    while True:
        try:
            model.weights
        except Exception as exc:  # (as a window's job reports one)
            print("Error:", repr(exc), file=sys.stderr, flush=True)
            return
        started.set()
threading.Thread(target=read, daemon=True).start()
started.wait()
"""


@pytest.mark.parametrize("kind", KINDS)
def test_a_thread_reading_the_weights_as_python_exits_finds_the_files_open(tmp_path, kind):
    """The held files stay open through the exit handlers: a job still running as Python exits
    (a window closed mid-run) reads its weights without an error."""
    source, _ = tiny_gqa_files(kind, tmp_path)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for _ in range(3):
        proc = subprocess.run([sys.executable, "-c", EXITING, str(source)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0 and "Error" not in proc.stderr, proc.stderr[-2000:]


def test_of_two_models_open_the_refusal_names_the_folder_of_the_one_that_changed(tmp_path):
    """Compare's A and B (or two training steps) each map a model.safetensors: the refusal says
    which."""
    a, b = (load_model(shutil.copytree(ROOT / "tests" / "fixtures" / "llama_gqa", tmp_path / step))
            for step in ("step-8", "step-16"))
    rewrite_in_place(tmp_path / "step-16" / "model.safetensors")
    a.run(ids=OTHER, request=FRESH)
    with pytest.raises(ModelFileChanged, match=r"^step-16/model\.safetensors changed on disk after attnviz"):
        b.run(ids=OTHER, request=FRESH)
