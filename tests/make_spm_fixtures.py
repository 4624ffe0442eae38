"""Generate the SentencePiece tokenizer fixtures: a real SentencePiece vocabulary as a GGUF carries
it, and the ids the model's own tokenizer (the `sentencepiece` library) gives for ~400 strings.

Dev venv only (``sentencepiece`` + ``protobuf``, and ``mistral_common`` installed ``--no-deps`` for
its data files; never the project venv). From the repository root:

    .devvenv/bin/pip install sentencepiece protobuf && .devvenv/bin/pip install --no-deps mistral_common
    .devvenv/bin/python tests/make_spm_fixtures.py

The vocabulary is Mistral-7B-v0.1's `tokenizer.model` (Apache-2.0), shipped in mistral_common as
``data/tokenizer.model.v1``: a 32,000-piece SentencePiece BPE with byte fallback, the tokenizer of
the Llama-2 family (Llama 2, Mistral 7B v0.1, TinyLlama and Phi-3 use the same kind of model).
It is found with ``importlib.util.find_spec`` (located, never imported).

Writes ``tests/fixtures/spm/``:
    vocab.npz     tokens (str), scores (float32), types (int32: llama.cpp's token types, mapped
                  as its convert_hf_to_gguf.py maps them), bos/eos/unk ids: what a GGUF holds
    tokens.json   for every string, the reference ids of two tokenizers:
                  "prefix":   the model as it is (add_dummy_prefix true, BOS added, as Mistral's
                              tokenizer_config.json says);
                  "noprefix": the same pieces with add_dummy_prefix false and no BOS (what a GGUF
                              with tokenizer.ggml.add_space_prefix false and add_bos_token false
                              describes, as Gemma's do)

The reference is `sentencepiece` itself, the tokenizer the model was trained with. It reads typed
text as text only: "<s>" in a text is four characters to it. llama.cpp (and attnviz) match the
control and unknown tokens whole in typed text (parse_special) and tokenize the text between them
one piece at a time, each piece prefixed with a space. For the strings holding "<s>", "</s>" or
"<unk>" the reference is therefore sentencepiece on each piece, llama.cpp's partition rule applied
here (`partition`), and the token's own id between them.
"""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as model_pb2

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from make_gguf_fixtures import token_strings  # noqa: E402  (the shared string list)

OUT = HERE / "fixtures" / "spm"
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# strings about SentencePiece itself: its visible space typed, byte-token spellings typed as text,
# characters outside the vocabulary (byte fallback), runs of spaces the vocabulary has pieces for
EXTRA = [
    "\u2581", "a\u2581b", "\u2581\u2581x", "<0x41>", "<0x0A>", "x<0xFF>y", "\U0001F9EC", "\u0D9E",
    "     x", "x     ", "      ", "a" + " " * 9 + "b", "\t\tx", "\u00a0\u00a0", "</s><s>", "<s> <s>",
    "<unk>x<unk>", "<s>\n", " <s>", "Hello<s>world</s>!", "<<s>>", "<s", "s>",
]


def model_path() -> Path:
    spec = importlib.util.find_spec("mistral_common")  # locates, does not import
    assert spec is not None, "mistral_common is not installed (pip install --no-deps mistral_common)"
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "tokenizer.model.v1"
    assert path.is_file(), path
    return path


def token_type(sp, i: int, proto_type: int) -> int:
    """llama.cpp's convert_hf_to_gguf.py (_create_vocab_sentencepiece): unknown, control, unused,
    byte, else normal (user-defined pieces keep their type)."""
    if sp.IsUnknown(i):
        return UNKNOWN
    if sp.IsControl(i):
        return CONTROL
    if sp.IsUnused(i):
        return UNUSED
    if sp.IsByte(i):
        return BYTE
    return USER_DEFINED if proto_type == model_pb2.ModelProto.SentencePiece.USER_DEFINED else NORMAL


def partition(text: str, specials: dict[str, int]) -> list:
    """llama.cpp's tokenizer_st_partition: the special tokens, longest first, cut out of the raw
    text pieces wherever they occur -> a list of str (raw text) and int (a token id)."""
    pieces: list = [text] if text else []
    for token in sorted(specials, key=len, reverse=True):
        out = []
        for piece in pieces:
            if not isinstance(piece, str):
                out.append(piece)
                continue
            parts = piece.split(token)
            for j, part in enumerate(parts):
                if j:
                    out.append(specials[token])
                if part:
                    out.append(part)
        pieces = out
    return pieces


def reference_ids(sp, text: str, specials: dict[str, int], bos: int | None) -> list[int]:
    ids = [bos] if bos is not None else []
    for piece in partition(text, specials):
        ids.extend([piece] if isinstance(piece, int) else sp.encode(piece))
    return ids


def main() -> int:
    raw = model_path().read_bytes()
    proto = model_pb2.ModelProto()
    proto.ParseFromString(raw)
    assert proto.trainer_spec.model_type == model_pb2.TrainerSpec.BPE
    assert proto.trainer_spec.byte_fallback
    norm = proto.normalizer_spec
    assert norm.add_dummy_prefix and not norm.remove_extra_whitespaces and norm.name == "identity", \
        "llama.cpp reproduces only an identity normalizer that keeps whitespace"
    sp = spm.SentencePieceProcessor(model_proto=raw)
    tokens = [p.piece for p in proto.pieces]
    scores = np.array([p.score for p in proto.pieces], dtype=np.float32)
    types = np.array([token_type(sp, i, p.type) for i, p in enumerate(proto.pieces)], dtype=np.int32)
    bos, eos, unk = sp.bos_id(), sp.eos_id(), sp.unk_id()
    specials = {tokens[i]: i for i in range(len(tokens)) if types[i] in (CONTROL, UNKNOWN)}
    assert specials == {"<unk>": 0, "<s>": 1, "</s>": 2}, specials

    proto.normalizer_spec.add_dummy_prefix = False
    sp_noprefix = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())

    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "vocab.npz", tokens=np.array(tokens), scores=scores, types=types,
                        bos=np.int64(bos), eos=np.int64(eos), unk=np.int64(unk))
    strings = token_strings() + [s for s in EXTRA if s not in set(token_strings())]
    cases = []
    for text in strings:
        prefix = reference_ids(sp, text, specials, bos)
        noprefix = reference_ids(sp_noprefix, text, specials, None)
        cases.append({"text": text, "prefix": prefix, "noprefix": noprefix,
                      "tokens": [tokens[i] for i in prefix]})
    doc = {
        "about": "reference ids from the sentencepiece library on Mistral-7B-v0.1's tokenizer.model "
                 "(mistral_common data/tokenizer.model.v1); see tests/make_spm_fixtures.py",
        "versions": {"sentencepiece": spm.__version__},
        "source_bytes": len(raw),
        "cases": cases,
    }
    (OUT / "tokens.json").write_text(json.dumps(doc, ensure_ascii=False, indent=0) + "\n",
                                     encoding="utf-8")
    sizes = {p.name: p.stat().st_size for p in sorted(OUT.iterdir())}
    print(f"{len(cases)} strings;", ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
