"""SentencePiece tokenizers built from a GGUF's tokenizer.ggml.* metadata (tokenizer.ggml.model =
llama), against the model's own tokenizer.

The vocabulary is Mistral-7B-v0.1's tokenizer.model (32,000 BPE pieces, byte fallback) written into
a GGUF the way llama.cpp's converter writes it (tests/gguf_files.spm_vocab_kv); the reference ids
come from the `sentencepiece` library on the same model (tests/make_spm_fixtures.py), the tokenizer
the model was trained with. transformers' GGUF tokenizer is not the reference: it spells a leading
space run differently for some architectures (see its phi3_tokenizer), and it leaves "<s>" in typed
text as characters, where llama.cpp matches it as the BOS token.
"""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.gguf_file import open_gguf
from attnviz.engine.reading.gguf_model import gguf_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import spm_vocab_kv, write_gguf, write_vocab_gguf  # noqa: E402

REF = Path(__file__).resolve().parents[1] / "fixtures" / "spm" / "tokens.json"
CASES = json.loads(REF.read_text(encoding="utf-8"))["cases"]


@pytest.fixture(scope="module")
def spm_gguf(tmp_path_factory):
    """(add_space_prefix true, BOS added) and (no prefix, no BOS) tokenizers."""
    folder = tmp_path_factory.mktemp("spm")
    built = {}
    for kind, prefix, bos in (("prefix", True, True), ("noprefix", False, False)):
        path = write_vocab_gguf(folder / f"{kind}.gguf", spm_vocab_kv(prefix, bos))
        tok, notice = gguf_tokenizer(open_gguf(path))
        assert notice is None
        built[kind] = tok
    return built


def test_the_reference_covers_the_string_kinds():
    """At least 200 strings, among them the empty string, whitespace runs, leading spaces, digits,
    unicode, emoji, code, special-token spellings and characters the vocabulary lacks."""
    texts = [c["text"] for c in CASES]
    assert len(texts) >= 200
    for wanted in ("", "   ", "  hello", "1234567890", "東京", "👨‍👩‍👧‍👦", "def f(x):\n    return x * 2\n",
                   "<s>", "\u0D9E"):
        assert wanted in texts, wanted


@pytest.mark.parametrize("kind", ["prefix", "noprefix"])
def test_ids_match_sentencepiece(spm_gguf, kind):
    """Every string gives the ids sentencepiece gives (with add_dummy_prefix as the GGUF's
    add_space_prefix says, BOS as its add_bos_token says)."""
    tok = spm_gguf[kind]
    wrong = [(c["text"], tok.encode(c["text"]).ids, c[kind]) for c in CASES
             if tok.encode(c["text"]).ids != c[kind]]
    assert not wrong, f"{len(wrong)} of {len(CASES)} differ, first: {wrong[:3]}"


def test_prefix_space_bos_and_byte_fallback(spm_gguf):
    """The space prefix makes the first word '▁Hello' (labelled 'Hello': the text has no space there);
    BOS comes first; a character the vocabulary lacks falls back to its UTF-8 bytes, labelled as
    the bytes each holds and, on the last, the character; offsets index the text."""
    enc = spm_gguf["prefix"].encode("Hello x\u0D9E")
    assert enc.tokens == ["<s>", "▁Hello", "▁x", "<0xE0>", "<0xB6>", "<0x9E>"]
    assert enc.labels == ["<s>", "Hello", "·x", "<E0>", "<B6>", "<9E>\u0D9E"]
    assert enc.offsets[1:3] == [(0, 5), (5, 7)] and enc.special[0]
    assert spm_gguf["noprefix"].encode("Hello world").tokens == ["Hello", "▁world"]


def test_control_tokens_typed_in_text_are_matched_whole(spm_gguf):
    """'<s>' typed in the text is the BOS token (llama.cpp with parse_special), and the text after it
    gets its own space prefix."""
    enc = spm_gguf["prefix"].encode("a<s>b")
    assert enc.ids == [1, 264, 1, 287]
    assert enc.tokens == ["<s>", "▁a", "<s>", "▁b"]


def test_without_the_flags_llama_cpp_defaults_apply(tmp_path):
    """A SentencePiece GGUF without add_bos_token or add_space_prefix adds BOS and prefixes a space,
    as llama.cpp does for this tokenizer kind."""
    path = write_vocab_gguf(tmp_path / "defaults.gguf", spm_vocab_kv(None, None))
    tok, _ = gguf_tokenizer(open_gguf(path))
    assert tok.encode("Hello").tokens == ["<s>", "▁Hello"]


def test_without_scores_the_file_is_refused(tmp_path):
    kv = spm_vocab_kv()
    del kv["tokenizer.ggml.scores"]
    path = write_vocab_gguf(tmp_path / "bad.gguf", kv)
    with pytest.raises(ModelLoadError, match=r"bad.gguf does not set tokenizer.ggml.scores, which must be one score per token"):
        gguf_tokenizer(open_gguf(path))


def test_a_model_with_a_sentencepiece_gguf_runs_text(tmp_path):
    """load_model on a Llama GGUF whose tokenizer is SentencePiece: typed text runs, BOS first."""
    kv = spm_vocab_kv()
    n_vocab, d = len(kv["tokenizer.ggml.tokens"]), 16
    cfg = {"model_type": "llama", "hidden_size": d, "num_attention_heads": 2, "num_key_value_heads": 1,
           "num_hidden_layers": 1, "intermediate_size": 8, "vocab_size": n_vocab,
           "max_position_embeddings": 64}
    rng = np.random.default_rng(0)
    tensors = {"token_embd.weight": rng.normal(size=(n_vocab, d)).astype(np.float32),
               "blk.0.attn_norm.weight": np.ones(d, np.float32),
               "blk.0.attn_q.weight": rng.normal(size=(d, d)).astype(np.float32),
               "blk.0.attn_k.weight": rng.normal(size=(8, d)).astype(np.float32),
               "blk.0.attn_v.weight": rng.normal(size=(8, d)).astype(np.float32),
               "blk.0.attn_output.weight": rng.normal(size=(d, d)).astype(np.float32),
               "blk.0.ffn_norm.weight": np.ones(d, np.float32)}
    model = load_model(write_gguf(tmp_path / "spm-llama.gguf", cfg, tensors, extra_kv=kv))
    assert model.notice is None
    result = model.run("The keys to the cabinet")
    assert result.input_ids.tolist() == [1, 415, 8148, 298, 272, 18266]
    assert result.labels[:3] == ["<s>", "The", "·keys"]
