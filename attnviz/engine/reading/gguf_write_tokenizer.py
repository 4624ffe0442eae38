"""A folder's tokenizer.json as GGUF metadata (`tokenizer.ggml.*`), as llama.cpp's
convert_hf_to_gguf.py writes a byte-level BPE tokenizer: gguf_write.py's tokenizer half."""

from __future__ import annotations

from pathlib import Path

import gguf
from gguf import GGUFValueType

from attnviz.engine.reading import gguf_vocab as vocab
from attnviz.engine.reading.config import ModelConfig
from attnviz.engine.reading.validate import exists, read_json_object

# a tokenizer.json Split regex -> the same regex as gguf_vocab.PRE_SPLITS writes it out
_CASE_GROUP = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_CASE_EXPANDED = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"


def pre_tokenizer_name(pre: dict | None) -> str | None:
    """The llama.cpp pre-tokenizer name (gguf_vocab.PRE_SPLITS) a tokenizer.json pre_tokenizer
    is, or None when it is none of them."""
    if not isinstance(pre, dict):
        return None
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    if not isinstance(steps, list) or not steps or not all(isinstance(s, dict) for s in steps):
        return None
    kinds = [s.get("type") for s in steps]
    last = steps[-1]
    if kinds[-1] != "ByteLevel":
        return None
    if kinds == ["ByteLevel"] and last.get("use_regex", True):
        return "gpt2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and last.get("use_regex", True):
        return "smollm"
    if kinds == ["Split", "ByteLevel"] and not last.get("use_regex", True):
        split = steps[0]
        regex = (split.get("pattern") or {}).get("Regex")
        if split.get("behavior") != "Isolated" or split.get("invert") or not isinstance(regex, str):
            return None
        regex = regex.replace(_CASE_GROUP, _CASE_EXPANDED)
        for name, splits in vocab.PRE_SPLITS.items():
            if splits == [regex]:
                return name
    return None


def hf_tokenizer_kv(folder: Path, cfg: ModelConfig) -> tuple[list, str | None]:
    """tokenizer.ggml.* for a folder's byte-level BPE tokenizer.json, as llama.cpp's converter
    writes them (get_vocab_base: ids without a token become [PADi], unused; added tokens are
    control tokens when special, else user-defined), or ([], why not) when it has none that
    attnviz's GGUF reader rebuilds the same way."""
    path = folder / "tokenizer.json"
    if not exists(path):
        return [], "no tokenizer.json: the file has no tokenizer (it takes token ids)"
    tok = read_json_object(path)
    model = tok.get("model") or {}
    pre = pre_tokenizer_name(tok.get("pre_tokenizer"))
    if model.get("type") != "BPE" or pre is None or not isinstance(model.get("vocab"), dict):
        return [], ("tokenizer not written: only byte-level BPE tokenizers with a pre-tokenizer "
                    f"attnviz reads ({', '.join(vocab.SUPPORTED_PRE)}) are; the file takes token ids")
    n = cfg.vocab_size
    ids = [i for i in model["vocab"].values() if isinstance(i, int)]
    ids += [a.get("id") for a in tok.get("added_tokens") or [] if isinstance(a.get("id"), int)]
    if ids and max(ids) >= n:
        return [], (f"tokenizer not written: tokenizer.json has token id {max(ids):,}, past the "
                    f"model's {n:,} embedding rows; the file takes token ids")
    tokens: list = [None] * n
    types = [vocab.NORMAL] * n
    for text, i in model["vocab"].items():
        if isinstance(i, int) and 0 <= i < n:
            tokens[i] = text
    for added in tok.get("added_tokens") or []:
        i = added.get("id")
        if isinstance(i, int) and 0 <= i < n and isinstance(added.get("content"), str):
            tokens[i] = added["content"]
            types[i] = vocab.CONTROL if added.get("special") else vocab.USER_DEFINED
    for i in range(n):
        if tokens[i] is None:
            tokens[i], types[i] = f"[PAD{i}]", vocab.UNUSED
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    S, A = GGUFValueType.STRING, GGUFValueType.ARRAY
    K = gguf.Keys.Tokenizer
    kv = [(K.MODEL, "gpt2", S, None), (K.PRE, pre, S, None), (K.LIST, tokens, A, S),
          (K.TOKEN_TYPE, types, A, GGUFValueType.INT32), (K.MERGES, merges, A, S)]
    bos = _template_bos(tok.get("post_processor"), tokens)
    kv.append((K.ADD_BOS, bos is not None, GGUFValueType.BOOL, None))
    if bos is not None:
        kv.append((K.BOS_ID, bos, GGUFValueType.UINT32, None))
    return kv, None


def _template_bos(post: dict | None, tokens: list) -> int | None:
    """The id of the token a tokenizer.json post-processor puts before the text, if any."""
    steps = (post or {}).get("processors") if (post or {}).get("type") == "Sequence" else [post]
    for step in steps or []:
        if isinstance(step, dict) and step.get("type") == "TemplateProcessing":
            single = step.get("single") or []
            first = single[0] if single else {}
            special = first.get("SpecialToken") if isinstance(first, dict) else None
            if special and special.get("id") in tokens:
                return tokens.index(special["id"])
    return None
