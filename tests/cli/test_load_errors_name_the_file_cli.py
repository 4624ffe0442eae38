"""A model whose files disagree is refused in one line that names the file and the value at fault
and says what to do: a config.json or GGUF header that counts more layers than the weights hold,
a vocabulary that is not the token embedding's, a tensor of another shape."""

from gguf_files import gguf_tensors, write_gguf
from tiny import tiny_text_model

TEXT = "the cat sat"


def test_text_given_to_a_gguf_without_a_tokenizer_says_the_file_has_none(tmp_path, cli):
    cfg, tensors = gguf_tensors(tiny_text_model(tmp_path / "m"))
    path = write_gguf(tmp_path / "bare.gguf", cfg, tensors)
    rc, _, err = cli("heads", "--model", str(path), "--text", TEXT)
    assert rc == 2
    assert "this GGUF holds no tokenizer (it sets no tokenizer.ggml.model): type token ids" in err, err
    assert "tokenizer.json" not in err
