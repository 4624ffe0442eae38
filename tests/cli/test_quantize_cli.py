"""`attnviz quantize` on the command line: what it prints, its JSON, and its one-line errors."""

import json
import os
from pathlib import Path

import gguf
import pytest

from attnviz.cli import main
from tests.tiny import FIXTURES


def test_quantize_writes_the_file_and_says_what_is_kept_at_f16(tmp_path, capsys):
    out = tmp_path / "m.Q8_0.gguf"
    assert main(["quantize", "--model", str(FIXTURES / "llama_gqa"), "--type", "Q8_0", "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert f"wrote {out}" in printed.out
    assert "21 tensors: 14 at Q8_0, 5 at F32, 2 at F16" in printed.out
    assert "F16 instead of Q8_0, rows not a whole number of its blocks: blk.0.ffn_down.weight (48 a row)" \
        in printed.out
    assert "note: no tokenizer.json" in printed.err
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(out).tensors}
    assert types["blk.0.attn_q.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"


def test_quantize_json(tmp_path, capsys):
    out = tmp_path / "m.gguf"
    assert main(["quantize", "--model", str(FIXTURES / "qwen3"), "--type", "bf16", "--out", str(out),
                 "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["type"] == "BF16" and got["out"] == str(out) and got["bytes"] == out.stat().st_size
    assert set(got) == {"model", "source", "out", "type", "bytes", "tensors", "kept_f16", "notices",
                        "seconds"}
    assert got["kept_f16"] == {} and set(got["tensors"]) == {"BF16", "F32"}


def test_quantize_errors_are_one_line_and_leave_no_file(tmp_path, capsys):
    cases = [
        (["--model", str(FIXTURES / "llama_gqa"), "--type", "Q3_K", "--out", str(tmp_path / "m.gguf")],
         "cannot quantize to 'Q3_K': the types are Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, F16, BF16, F32"),
        (["--model", str(FIXTURES / "llama_gqa"), "--type", "Q4_0", "--out", str(tmp_path / "no" / "m.gguf")],
         "the folder"),
        (["--model", str(tmp_path / "none"), "--type", "Q4_0", "--out", str(tmp_path / "m.gguf")],
         "no model"),
        (["--model", str(FIXTURES / "gpt2"), "--type", "Q4_0", "--out", str(tmp_path / "m.gguf")],
         "a gpt2 model is not written to GGUF"),
    ]
    for args, message in cases:
        assert main(["quantize", *args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("attnviz quantize: error: ") and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_the_written_file_has_a_normal_files_permissions(tmp_path, capsys):
    out = tmp_path / "m.gguf"
    umask = os.umask(0o027)
    try:
        assert main(["quantize", "--model", str(FIXTURES / "llama_gqa"), "--type", "Q8_0", "--out", str(out)]) == 0
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o640  # 0666 less the umask, not mkstemp's 0600


@pytest.mark.parametrize("out", ["/sys/x.gguf", "/proc/x.gguf"])
def test_a_folder_that_takes_no_file_is_named_with_the_output_not_the_temporary_file(out, capsys):
    """Unwritable even for root (CI runs as root): sysfs and procfs take no new file."""
    if not Path(out).parent.is_dir():
        pytest.skip(f"no {Path(out).parent} here")
    assert main(["quantize", "--model", str(FIXTURES / "llama_gqa"), "--type", "Q8_0", "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"attnviz quantize: error: cannot write {out}: ") and err.count("\n") == 1, err
    assert ".part" not in err and "Errno" not in err, err
