"""`attnviz compare`: its JSON keys and the engine's numbers, the short report, the JSD map files, and
one-line refusals (B that does not open, another vocabulary or shape, an output that cannot be
written, a memory budget two models do not fit in)."""

import hashlib
import json

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from tiny import FIXTURES, tiny_llama

from attnviz.engine import load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import models_pair
from attnviz.engine.reading import memory_budget as MB

LLAMA = str(FIXTURES / "llama_gqa")
IDS = "3,1,4,1,5,9,2,6,5,3,5,8"
KEYS = ["tokens", "labels", "input_ids", "a", "b", "heads_jsd", "heads_jsd_max", "resid_cos", "kld",
        "kld_stats", "same_top1", "flips", "induction"]


@pytest.fixture(autouse=True)
def _default_budget():
    yield
    MB.set_memory_budget(None)


@pytest.fixture(scope="module")
def nudged(tmp_path_factory):
    """llama_gqa with every weight nudged: model B of the same shape and vocabulary."""
    folder = tmp_path_factory.mktemp("nudged")
    (folder / "config.json").write_text((FIXTURES / "llama_gqa" / "config.json").read_text())
    rng = np.random.default_rng(3)
    save_file({k: v + (rng.standard_normal(v.shape) * 0.05).astype(v.dtype)
               for k, v in load_file(FIXTURES / "llama_gqa" / "model.safetensors").items()},
              folder / "model.safetensors")
    return folder


def test_json_has_the_interface_keys_and_the_engines_numbers(cli, nudged):
    rc, out, _ = cli("compare", "--model", LLAMA, "--against", str(nudged), "--ids", IDS, "--json")
    assert rc == 0
    doc = json.loads(out)
    assert list(doc) == KEYS
    a, b = load_model(LLAMA), load_model(nudged)
    ids = [int(i) for i in IDS.split(",")]
    want = C.compare(models_pair(a, b, ids, C.compare_trace), C.probe_pair(a, b))
    assert doc["input_ids"] == ids and doc["tokens"] == [str(i) for i in ids]
    for key in KEYS[5:]:
        assert doc[key] == want[key], key
    assert doc["flips"] and 0 < doc["same_top1"] < 1 and np.min(doc["heads_jsd"]) > 0
    sha = hashlib.sha256((nudged / "model.safetensors").read_bytes()).hexdigest()
    assert doc["b"]["files"] == [{"file": str(nudged / "model.safetensors"), "sha256": sha}]
    assert doc["a"]["name"] == "llama_gqa" and doc["b"]["quantized"] is None


def test_the_report_lists_moved_heads_kld_top1_flips_and_induction(cli, nudged):
    rc, out, _ = cli("compare", "--model", LLAMA, "--against", str(nudged), "--ids", IDS)
    assert rc == 0
    _, js, _ = cli("compare", "--model", LLAMA, "--against", str(nudged), "--ids", IDS, "--json")
    doc = json.loads(js)
    lines = out.splitlines()
    (l, h, v), *_ = C.moved_most(doc["heads_jsd"], 10)
    start = next(i for i, s in enumerate(lines) if "moved most" in s)
    assert lines[start + 1].split()[:3] == [f"L{l}", f"H{h}", f"{v:.3g}"]
    assert len([s for s in lines[start + 1:start + 11] if s.startswith("  L")]) == 10
    assert f"mean {doc['kld_stats']['mean']:.3g}" in out and f"p99 {doc['kld_stats']['p99']:.3g}" in out
    assert f"same top-1: {doc['same_top1']:.1%}" in out
    assert out.count("flip after token") == min(10, len(doc["flips"]))
    assert "lost in B: 0" in out


def test_a_b_with_no_head_moved_lists_none_as_moved(cli):
    """A model against itself: every head's JSD is exactly 0, and the report says so in place of
    a list of heads "that moved most" by 0."""
    rc, out, _ = cli("compare", "--model", LLAMA, "--against", LLAMA, "--ids", IDS)
    assert rc == 0
    assert "attention JSD (bits), mean over heads 0; no head moved: every head's JSD is exactly 0\n" in out
    assert "moved most" not in out and not any(s.startswith("  L") for s in out.splitlines())


def test_checkpoints_of_one_model_lose_the_induction_heads(cli, toy):
    rc, out, _ = cli("compare", "--model", "attnviz-toy-stdlib", "--against-checkpoint", "0",
                     "--probe", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["a"]["checkpoint"]["index"] == 32 and doc["b"]["checkpoint"]["index"] == 0
    assert doc["induction"]["lost"] and not doc["induction"]["survived"]
    assert doc["input_ids"][:len(doc["input_ids"]) // 2] != []


@pytest.mark.parametrize("suffix", [".csv", ".json", ".png"])
def test_out_writes_the_jsd_map(qapp, cli, nudged, tmp_path, suffix):  # (qapp: before offscreen())
    out = tmp_path / f"map{suffix}"
    rc, stdout, _ = cli("compare", "--model", LLAMA, "--against", str(nudged), "--ids", IDS,
                        "--json", "--out", str(out))
    assert rc == 0
    doc = json.loads(stdout)
    if suffix == ".csv":
        rows = out.read_text().splitlines()
        assert rows[0] == "layer,head,jsd,jsd_max" and len(rows) == 1 + 2 * 8
        l, h, v, m = rows[3].split(",")
        assert (int(l), int(h)) == (0, 2) and float(v) == doc["heads_jsd"][0][2] and float(m) == doc["heads_jsd_max"][0][2]
    elif suffix == ".json":
        assert json.loads(out.read_text()) == doc
    else:
        from PySide6.QtGui import QImage

        from attnviz.commands.export_cmd import offscreen
        from attnviz.figures import compare as F
        from attnviz.figures import headmap

        with offscreen():
            img = QImage(str(out))
            hm = F.jsd_map(doc["heads_jsd"], "a", "b")
            lay = headmap.layout(hm, img.width(), img.height())
            l, h, _ = C.moved_most(doc["heads_jsd"], 1)[0]
            x, y = headmap.cell_center(hm, lay, l, h)
            assert img.pixelColor(int(x), int(y)) == headmap.colour(doc["heads_jsd"][l][h], hm.limit)


def _refused(cli, *argv):
    rc, out, err = cli("compare", *argv)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, (rc, out, err)
    return err


def test_a_b_that_does_not_open_is_one_line(cli, tmp_path):
    (tmp_path / "broken.gguf").write_bytes(b"not a gguf")
    err = _refused(cli, "--model", LLAMA, "--against", str(tmp_path / "broken.gguf"), "--ids", IDS)
    assert "model B (" in err and "broken.gguf" in err
    err = _refused(cli, "--model", LLAMA, "--against", str(tmp_path / "none"), "--ids", IDS)
    assert "model B (" in err


def test_another_shape_or_vocabulary_is_refused_with_both_numbers(cli, tmp_path):
    deep = tiny_llama(tmp_path / "deep", n_layer=3, vocab=128)
    err = _refused(cli, "--model", LLAMA, "--against", str(deep), "--ids", IDS)
    assert "llama_gqa has 2 layers and deep has 3" in err
    err = _refused(cli, "--model", "all-MiniLM-L6-v2", "--against", str(FIXTURES / "bert"), "--text", "hi")
    assert "a pair needs" in err or "no tokenizer" in err


def test_an_output_that_cannot_be_written_leaves_no_file(cli, nudged, tmp_path):
    err = _refused(cli, "--model", LLAMA, "--against", str(nudged), "--ids", IDS,
                   "--out", str(tmp_path / "missing" / "map.csv"))
    assert "does not exist" in err
    err = _refused(cli, "--model", LLAMA, "--against", str(nudged), "--ids", IDS,
                   "--out", str(tmp_path / "map.txt"))
    assert "must end in .csv, .json, .png" in err
    (tmp_path / "map.png").mkdir()  # a folder where the file would go
    err = _refused(cli, "--model", LLAMA, "--against", str(nudged), "--ids", IDS,
                   "--out", str(tmp_path / "map.png"))
    assert "is a folder" in err


def test_a_write_that_fails_halfway_leaves_no_partial_file(cli, nudged, tmp_path, monkeypatch):
    import errno

    from export_files import half_then

    from attnviz.figures import data as export_data

    monkeypatch.setattr(export_data, "write_all",
                        half_then(OSError(errno.ENOSPC, "No space left on device"), 1))
    err = _refused(cli, "--model", LLAMA, "--against", str(nudged), "--ids", IDS,
                   "--out", str(tmp_path / "map.csv"))
    assert "map.csv: no space left on device" in err and list(tmp_path.iterdir()) == []


def test_a_memory_budget_two_models_do_not_fit_in_is_one_line(cli, nudged):
    # llama_gqa's layers are 78,336 bytes as float32: 160K keeps A's two, and B gets what is left
    err = _refused(cli, "--model", LLAMA, "--against", str(nudged), "--ids", IDS,
                   "--memory-budget", "160K")
    assert "memory budget" in err and "model B" in err
    rc, _, _ = cli("--memory-budget", "1M", "compare", "--model", LLAMA, "--against",
                   str(nudged), "--ids", IDS, "--json")  # before the command, as every command takes it
    assert rc == 0


def test_a_b_that_does_not_open_under_a_budget_is_not_led_by_the_budget(cli, tmp_path):
    # 1M leaves B room for llama_gqa's layers: the file, not the budget, is why B is refused
    (tmp_path / "broken.gguf").write_bytes(b"not a gguf")
    err = _refused(cli, "--memory-budget", "1M", "--model", LLAMA, "--against",
                   str(tmp_path / "broken.gguf"), "--ids", IDS)
    assert f"Could not load model B ({tmp_path / 'broken.gguf'}). " in err, err
    assert "memory budget" not in err, err


def test_b_must_be_given(cli):
    err = _refused(cli, "--model", LLAMA, "--ids", IDS)
    assert "--against B, --quantize TYPE" in err


def test_a_quantized_twin_is_named_with_its_source_files_and_bad_types_are_refused(cli, toy):
    rc, out, _ = cli("compare", "--model", "attnviz-toy-stdlib", "--quantize", "q8_0", "--probe",
                     "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["b"]["quantized"] == "Q8_0" and doc["b"]["files"] == doc["a"]["files"]
    assert doc["b"]["name"].endswith("quantized to Q8_0")
    assert 0 < np.max(doc["heads_jsd"]) < 0.01 and doc["induction"]["lost"] == []
    assert doc["induction"]["survived"]  # the toy model's induction heads survive Q8_0
    err = _refused(cli, "--model", "attnviz-toy-stdlib", "--quantize", "Q3_K", "--probe")
    assert "Could not load attnviz-toy-stdlib quantized to Q3_K. Cannot quantize to 'Q3_K': the types are" in err
    err = _refused(cli, "--model", "attnviz-toy-stdlib", "--quantize", "Q8_0", "--against-checkpoint", "0",
                   "--probe")
    assert "--against-checkpoint" in err


def test_the_windows_quantize_menu_offers_the_types_attnviz_writes():
    from attnviz.engine.reading.quantize import QUANT_TYPES
    from attnviz.ui.panels.compare_menu import QUANT_TYPES as MENU

    assert MENU == QUANT_TYPES


def test_a_quantized_b_keeps_to_what_the_budget_leaves(cli, toy):
    # the toy model's layers are 270,864 bytes as float32: A holds both of them in 700K, which
    # leaves B less than one
    err = _refused(cli, "--model", "attnviz-toy-stdlib", "--quantize", "Q8_0", "--probe",
                   "--memory-budget", "700K")
    assert "quantized to Q8_0" in err and "memory budget" in err


def test_the_text_report_of_lost_heads_needs_no_qt():
    """`attnviz compare` prints its report, lost induction heads and their strengths included,
    where PySide6 cannot be imported (a machine without Qt's libraries)."""
    import os
    import subprocess
    import sys

    code = ("import sys; sys.modules['PySide6'] = None; from attnviz.cli import main; "
            "rc = main(['compare', '--model', 'attnviz-toy-stdlib', '--against-checkpoint', '0', "
            "'--probe']); print('rc', rc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    lines = out.stdout.splitlines()
    assert lines and lines[-1] == "rc 0", out.stdout[-2000:] + out.stderr[-2000:]
    lost = [s for s in lines if s.startswith("  lost L")]
    assert lost and all(" -> " in s for s in lost), out.stdout[-2000:]


def test_the_csv_of_the_divergences_needs_no_qt(tmp_path):
    """`attnviz compare --out map.csv` writes the per-head divergences where PySide6 cannot be
    imported: a text export, as the printed report."""
    import os
    import subprocess
    import sys

    out = tmp_path / "map.csv"
    code = ("import sys; sys.modules['PySide6'] = None; from attnviz.cli import main; "
            "rc = main(['compare', '--model', 'attnviz-toy-stdlib', '--against-checkpoint', '0', "
            f"'--probe', '--out', {str(out)!r}]); print('rc', rc)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    lines = run.stdout.splitlines()
    assert lines and lines[-1] == "rc 0", run.stdout[-2000:] + run.stderr[-2000:]
    rows = out.read_text().splitlines()
    assert rows[0] == "layer,head,jsd,jsd_max" and len(rows) > 1
