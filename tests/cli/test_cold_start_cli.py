"""A command's start: it imports its own module only (not the other commands', the calculator's,
the figures' or the corpus code), a short text runs on one BLAS thread and a long one on BLAS's own
threads, and the results are the same bits as before: predict's JSON and generate's steps equal
the engine's on BLAS's default threads (benchmarks/cold_start.py times the commands)."""

import gc
import json
import subprocess
import sys

import numpy as np
import pytest
from blas_rows import assert_same
from threadpoolctl import threadpool_info, threadpool_limits

from attnviz.cli import main
from attnviz.engine.computing.request import RunRequest

SMOLLM2 = "SmolLM2-135M-Instruct"
TEXT = "One, two, three, four, five"

IMPORTS = """
import sys
from attnviz.cli import main
assert main(["predict", "--model", "attnviz-textbook", "--text", "the cat", "--top", "1"]) == 0
print(" ".join(sorted(m for m in sys.modules if m.startswith("attnviz."))))
"""


def _blas_threads() -> int:
    return next(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")


def test_a_command_imports_its_own_module_only():
    out = subprocess.run([sys.executable, "-c", IMPORTS], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.splitlines()[-1].split())  # (the last line: the modules)
    assert "attnviz.commands.predict_cmd" in loaded
    others = {m for m in loaded if m.startswith("attnviz.commands.") and m.endswith("_cmd")
              and m != "attnviz.commands.predict_cmd"} | {m for m in loaded if m.startswith((
                  "attnviz.engine.calc", "attnviz.figures", "attnviz.corpus", "attnviz.ui"))}
    # (the table's numbers are written by figures/numbers.py: a few lines of formatting, no Qt)
    assert others - {"attnviz.figures", "attnviz.figures.numbers"} == set()


def test_help_still_lists_every_command(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in ("models", "attention", "calc", "heads", "find", "predict", "ablation-scan",
                 "generate", "export", "scan", "scan-report"):
        assert name in out


def test_a_short_text_runs_on_one_blas_thread_and_a_long_one_on_blas_own(smollm2):
    from attnviz.commands.checks import FEW_ROWS, blas_for

    with threadpool_limits(limits=2, user_api="blas"):
        default = _blas_threads()
        with blas_for(len(smollm2.prepare(TEXT).ids)):
            assert _blas_threads() == 1
        with blas_for(FEW_ROWS):
            assert _blas_threads() == 1
        with blas_for(len(smollm2.prepare(" five" * (FEW_ROWS + 1)).ids)):
            assert _blas_threads() == default
        assert _blas_threads() == default


def test_predict_and_generate_give_the_same_bits_as_on_blas_default_threads(smollm2, capsys,
                                                                            monkeypatch):
    from attnviz.commands import checks
    from attnviz.commands.predict_cmd import predict_report

    # the float32 path's bits (the kernels' path: tests/cli/test_generate_kernels_cli.py)
    monkeypatch.setattr(checks, "KERNELS_FROM", float("inf"))
    monkeypatch.setattr(checks, "KERNELS_STEPS", float("inf"))
    from attnviz.engine.analysing import predict as P
    from attnviz.engine.computing.generate import generate

    assert main(["predict", "--model", SMOLLM2, "--text", TEXT, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    with threadpool_limits(limits=2, user_api="blas"):
        r = smollm2.run(TEXT, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
        want = json.loads(json.dumps(predict_report(smollm2, r, None, 10, None, None)))
    assert doc.pop("model") == SMOLLM2 and want.pop("model") == smollm2.name  # (loaded by its file)
    assert_same(doc, want)  # every float of the JSON, bit for bit where the BLAS allows (tests/blas_rows.py)
    assert main(["generate", "--model", SMOLLM2, "--text", TEXT, "--max-new", "8", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    with threadpool_limits(limits=2, user_api="blas"):
        gen = generate(smollm2, TEXT, max_new=8)
    assert got["new_ids"] == gen.new_ids
    assert_same([s["top"] for s in got["steps"]], [json.loads(json.dumps(s.top_json())) for s in gen.steps])
    assert np.all([s["kv_bytes"] for s in got["steps"]] == [s.kv_bytes for s in gen.steps])


def test_every_command_is_mapped_to_the_module_that_registers_it():
    from attnviz.cli import COMMANDS, build_parser

    owners = {name: p.get_default("func").__module__.rsplit(".", 1)[-1]
              for name, p in build_parser().commands.items()}
    assert owners == COMMANDS


ONE_SHOT = """
import gc, json, sys
from attnviz.engine.reading import pages
reclaims = sys.argv[1] == "reclaims"
pages.host_reclaims_free_memory = lambda sys_root="/sys": reclaims
if sys.argv[1] == "mapped":  # every large array a mapping of its own, as without the one-shot setup
    pages.reuse_freed_memory = lambda: False
from attnviz.cli import main
sys.argv = ["attnviz", *sys.argv[2:]]
rc = main()  # the process's own command line: set up as a one-shot process
print("STATE", json.dumps({"rc": rc, "huge_pages": pages.huge_pages(), "frozen": gc.get_freeze_count() > 0}))
"""


@pytest.mark.parametrize("command", [
    ["predict", "--model", SMOLLM2, "--text", TEXT, "--json"],
    ["generate", "--model", SMOLLM2, "--text", TEXT, "--max-new", "8", "--json"],
])
def test_a_one_shot_process_gives_the_same_bits_on_small_pages(command):
    """Where the host takes back free memory, a command's process asks for small pages (its
    layers' arena advised against huge pages, engine/reading/pages.py), its arrays come from freed
    ones (pages.reuse_freed_memory), and it freezes what its imports made out of the garbage
    collector's passes: its JSON is the same, every float bit for bit, as with huge pages and as
    with each large array a mapping of its own."""
    runs = {}
    for host in ("reclaims", "keeps", "mapped"):
        out = subprocess.run([sys.executable, "-c", ONE_SHOT, host, *command], capture_output=True,
                             text=True, check=True).stdout
        doc, state = out.rsplit("STATE ", 1)
        runs[host] = json.loads(doc), json.loads(state)
    assert runs["reclaims"][1] == {"rc": 0, "huge_pages": False, "frozen": True}
    assert runs["keeps"][1] == {"rc": 0, "huge_pages": True, "frozen": True}
    assert runs["reclaims"][0] == runs["keeps"][0] == runs["mapped"][0]


def test_a_caller_passing_argv_keeps_its_process_as_it_is(capsys, monkeypatch):
    from attnviz.engine.reading import pages

    monkeypatch.setattr(pages, "host_reclaims_free_memory", lambda sys_root="/sys": True)
    frozen = gc.get_freeze_count()
    assert main(["predict", "--model", "attnviz-textbook", "--text", "the cat", "--top", "1"]) == 0
    assert pages.huge_pages() and gc.get_freeze_count() == frozen


def test_predict_expands_a_gguf_layer_at_a_time_and_gives_the_same_bits(capsys):
    """predict loads a GGUF file's layers as its run reaches them and lets each go after
    (checks.load_for_one_pass): each layer expanded once, one held at a time, and its JSON is the
    one of a model whose layers are all kept (every float bit for bit)."""
    from attnviz.commands import checks
    from attnviz.commands.predict_cmd import predict_report
    from attnviz.engine import load_model
    from attnviz.engine.analysing import predict as P

    model = checks.load_for_one_pass(SMOLLM2)
    layers = model.weights.layers
    assert layers.expansions == 0 and layers.kept == 0
    kept = load_model(SMOLLM2)
    assert kept.weights.layers.kept == len(kept.weights.layers)

    reports = []
    for m in (model, kept):
        r = m.run(TEXT, trace=P.prediction_trace(), request=RunRequest(use_cache=False))
        reports.append(json.loads(json.dumps(predict_report(m, r, None, 10, None, None))))
    assert reports[0] == reports[1]
    assert layers.expansions == len(layers)  # each layer once
    assert layers.held_bytes() <= max(layers.sizes)
    assert main(["predict", "--model", SMOLLM2, "--text", TEXT, "--json"]) == 0
    assert_same(json.loads(capsys.readouterr().out), reports[1])  # (its BLAS threads may differ: blas_rows)


def test_a_scan_keeps_huge_pages_as_the_window_does(monkeypatch):
    """A scan's workers run the same layers over many texts: no small pages asked for."""
    import attnviz.cli as cli
    from attnviz.engine.reading import pages

    monkeypatch.setattr(pages, "host_reclaims_free_memory", lambda sys_root="/sys": True)
    try:
        cli.one_shot_process("scan")
        assert pages.huge_pages()
        cli.one_shot_process("predict")
        assert not pages.huge_pages()
    finally:
        pages.use_huge_pages(True)
        gc.unfreeze()
