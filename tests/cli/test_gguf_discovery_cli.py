"""`attnviz models` on the GGUF stores llama.cpp, LM Studio and Ollama keep (the stores are built
by the registry tests' fixtures)."""

from tiny import FIXTURES
from gguf_files import gguf_tensors, write_gguf
from tests.engine.test_gguf_discovery import home, stores  # noqa: F401  (fixtures)


def test_cli_lists_gguf_models_and_says_what_is_hidden(stores, home, capsys):  # noqa: F811
    from attnviz.cli import main

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    write_gguf(home / ".lmstudio" / "models" / "gem.gguf", cfg, tensors, arch="gemma2")
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["NAME", "FAMILY", "LAYERS"]
    row = next(r for r in rows if r.startswith("ollama:tiny:1b "))
    assert row.split()[1:8] == ["llama", "2", "x", "8", "2", "-", "ollama"]  # "-": no checkpoints
    assert row.split()[-1].endswith(stores["model_blob"][7:])
    assert "gem " not in out and "1 more GGUF file" in out and "--all" in out
    assert main(["models", "--all"]) == 0
    out = capsys.readouterr().out
    assert any(r.startswith("gem ") for r in out.splitlines())
    assert "cannot open yet: GGUF architecture 'gemma2'" in out and "more GGUF" not in out
