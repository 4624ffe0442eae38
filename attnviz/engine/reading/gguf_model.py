"""Reading GGUF models (llama.cpp, LM Studio, Ollama) into the engine's one layout.

The header and metadata are read by gguf_file.py (a `ModelConfig`), the tensors by gguf_tensors.py
(dequantised with `gguf.quants`, llama.cpp's Q/K row permutation undone so the engine keeps one
RoPE, rotate-half); this module plans and expands each layer and builds the tokenizer from
`tokenizer.ggml.*` with the `tokenizers` library.

Memory: the tensors stay in the file's type, memory-mapped. Each layer is dequantised to float32
when it runs, and as many expanded layers are kept as the memory budget allows (`LayerStore`,
engine/reading/budget.py: all of them for a model that fits, read at load). Where the process
asked for the quantised kernels (qpack.kernels_on), each layer's matrices are packed from the
file's blocks instead and held so (the store's packed views): no float32 copy of a packed matrix
is made until something asks for one (a run of many rows, an analysis that reads a whole matrix),
and the file's pages read for them are released. The token embedding stays quantised and only the
rows a run needs are dequantised (`QuantRows`, gguf_tensors.py).
"""


from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType
from tokenizers import processors

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading import gguf_text_vocab as text_vocab
from attnviz.engine.reading import gguf_vocab as vocab
from attnviz.engine.reading.budget import LayerStore, float32_array
from attnviz.engine.reading.memory_budget import grams_bytes, resolve_budget
from attnviz.engine.reading.config import ModelConfig
from attnviz.engine.reading.gguf_file import (
    PERMUTED_QK, metadata, source_name, architecture, check_counts, gguf_config, gguf_display_name,
    open_gguf, string_bytes,
)
from attnviz.engine.reading.gguf_tensors import (
    GGUFTensors, unpermute_qk, unpermuted_rows,
)
from attnviz.engine.reading.layout import (
    Head, Layer, ReadModel, Weights, cat_bias, kept_in_c_order, read_head,
)
from attnviz.engine.reading.qpack import PACKED, PackedLayer, kernels_on, pack_parts, packed_nbytes
from attnviz.engine.reading.tokenizer import TextTokenizer
from attnviz.engine.reading.validate import is_whole, refusal, show

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Fill:  # one tensor written into rows at..at + shape[0] of a layer matrix [out, in]
    name: str
    shape: tuple[int, int]
    at: int
    rows: np.ndarray | None = None  # out[r] = tensor[rows[r]] (llama.cpp's Q/K permutation undone)


@dataclass(frozen=True)
class _LayerPlan:
    """Where layer i's matrices come from in the file, each checked (name, shape, type) at load.
    The file's matrices are [out, in] rows; the engine multiplies by [in, out], laid out with the
    longer side contiguous (_matrix)."""
    qkv: tuple  # _Fill parts of [(n_head + 2 n_kv_head) d_head, d_model]
    o: tuple  # [d_model, n_head d_head]
    gate_up: tuple | None  # [2 d_ff, d_model] (gate | up), None: the last layer has no MLP
    down: tuple | None  # [d_model, d_ff]
    small: dict  # Layer field -> tensor name, shape of the vectors (biases, norm gains)


def _qkv_plan(cfg: ModelConfig, ts: GGUFTensors, b: str, permuted: bool) -> tuple:
    """Block `b`'s q, k, v rows: separate tensors, or Phi-3's fused attn_qkv
    [(n_head + 2 n_kv_head) d_head, d_model]."""
    d = cfg.d_model
    dq, dkv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    rq = unpermuted_rows(dq, cfg.n_head) if permuted else None
    rk = unpermuted_rows(dkv, cfg.n_kv_head) if permuted else None
    if b + "attn_qkv.weight" in ts:
        rows = None if not permuted else np.concatenate([rq, dq + rk, np.arange(dq + dkv, dq + 2 * dkv)])
        return (_Fill(b + "attn_qkv.weight", (dq + 2 * dkv, d), 0, rows),)
    return (_Fill(b + "attn_q.weight", (dq, d), 0, rq), _Fill(b + "attn_k.weight", (dkv, d), dq, rk),
            _Fill(b + "attn_v.weight", (dkv, d), dq + dkv))


def _gate_up_plan(cfg: ModelConfig, ts: GGUFTensors, b: str) -> tuple:
    """Block `b`'s gate and up rows: separate tensors, or Phi-3's fused ffn_up [2 d_ff, d_model]
    (gate first, as llama.cpp's SwiGLU splits it)."""
    d, f = cfg.d_model, cfg.d_ff
    if b + "ffn_gate.weight" not in ts and cfg.model_type == "phi3":
        return (_Fill(b + "ffn_up.weight", (2 * f, d), 0),)
    return (_Fill(b + "ffn_gate.weight", (f, d), 0), _Fill(b + "ffn_up.weight", (f, d), f))


def _layer_plan(cfg: ModelConfig, arch: str, ts: GGUFTensors, i: int) -> _LayerPlan:
    """Layer i's plan, every tensor it names checked against the file (present, its shape, a
    float or quantised type): a file missing one is refused at load, not in a later run."""
    d, f = cfg.d_model, cfg.d_ff
    dq, dkv = cfg.n_head * cfg.d_head, cfg.n_kv_head * cfg.d_head
    b = f"blk.{i}."
    # the last layer's MLP changes no pattern: a file without it opens for attention (only
    # prediction, which reads the final residual stream, needs it)
    last = i == cfg.n_layer - 1 and b + "ffn_up.weight" not in ts
    small = {}
    if b + "attn_q.bias" in ts:
        small.update(b_q=(b + "attn_q.bias", (dq,)), b_k=(b + "attn_k.bias", (dkv,)),
                     b_v=(b + "attn_v.bias", (dkv,)))
    elif cfg.qkv_bias:
        raise ModelLoadError(f"{ts.path.name} has no tensor {b + 'attn_q.bias'!r}")
    if b + "attn_output.bias" in ts:
        small["b_o"] = (b + "attn_output.bias", (d,))
    small.update(norm1=(b + "attn_norm.weight", (d,)), norm2=(b + "ffn_norm.weight", (d,)))
    if cfg.qk_norm:
        small.update(q_norm=(b + "attn_q_norm.weight", (cfg.d_head,)),
                     k_norm=(b + "attn_k_norm.weight", (cfg.d_head,)))
    if cfg.family == "gemma3":
        small.update(post_attn_norm=(b + "post_attention_norm.weight", (d,)),
                     post_mlp_norm=(b + "post_ffw_norm.weight", (d,)))
    plan = _LayerPlan(qkv=_qkv_plan(cfg, ts, b, arch in PERMUTED_QK),
                      o=(_Fill(b + "attn_output.weight", (d, dq), 0),),
                      gate_up=None if last else _gate_up_plan(cfg, ts, b),
                      down=None if last else (_Fill(b + "ffn_down.weight", (d, f), 0),), small=small)
    for fills in (plan.qkv, plan.o, plan.gate_up or (), plan.down or ()):
        for fill in fills:
            ts.check(fill.name, fill.shape)
    for name, shape in small.values():
        ts.check(name, shape)
    return plan


MATRICES = ("w_qkv", "w_o", "w_in", "w_out")  # a layout.Layer's matrices, as _fills names them


def _fills(plan: _LayerPlan) -> dict:
    """Layer field -> the fills of that matrix (None: the last layer has no MLP)."""
    return dict(zip(MATRICES, (plan.qkv, plan.o, plan.gate_up, plan.down)))


def _matrix(fills, ts: GGUFTensors, check: bool, release: bool = False):  # -> [in, out] float32
    """A layer matrix as the engine multiplies by it, [in, out], from the file's [out, in] rows,
    laid out by layout.kept_in_c_order: C order (written as columns), else the transposed view of
    the rows as read (Fortran order). Written in the load's arena. None: no fills. `release`: the
    file's pages it read are unmapped after (a model whose layers are packed reads them once)."""
    if fills is None:
        return None
    n_out, n_in = sum(f.shape[0] for f in fills), fills[0].shape[1]
    columns = kept_in_c_order(n_in, n_out)
    out = float32_array((n_in, n_out) if columns else (n_out, n_in))
    for f in fills:
        part = out[:, f.at:f.at + f.shape[0]] if columns else out[f.at:f.at + f.shape[0]]
        ts.fill(f.name, f.shape, part, f.rows, check, columns=columns)
        if release:
            ts.release(f.name, f.shape)
    return out if columns else out.T


def _packed_matrix(fills, ts: GGUFTensors, check: bool):  # -> qpack.PackedMatrix (None: no fills, or no kernel)
    """A layer matrix's tensors in the kernels' layout (engine/reading/qpack.py), rows in the
    engine's order (llama.cpp's Q/K permutation undone). `check`: refused, as an expansion refuses
    it, when a value is not finite (a non-finite scale or offset: the integers are always
    finite). The file's pages it read are unmapped after: the packed copy is what is kept."""
    if fills is None:
        return None
    parts = []
    for f in fills:
        t = ts.stored(f.name, f.shape)
        rows = np.asarray(t.data).reshape(f.shape[0], -1)  # [out, row bytes]
        parts.append((t.tensor_type, rows if f.rows is None else rows[f.rows], f.at))
    pm = pack_parts(parts)
    if pm is not None and check and not pm.finite:
        for f in fills:  # the expansion's check names the tensor, the count and the first position
            ts.get(f.name, f.shape, True)
        raise ModelLoadError(f"{ts.path.name}: tensor {fills[0].name} holds non-finite scales")
    for f in fills:
        ts.release(f.name, f.shape)
    return pm


def _packed_layer(plan: _LayerPlan, ts: GGUFTensors, check: bool) -> PackedLayer:
    return PackedLayer(*(_packed_matrix(f, ts, check) for f in _fills(plan).values()))


def _matrix_types(plan: _LayerPlan, ts: GGUFTensors) -> list:
    """(block type, shape) of each of the layer's matrices, as the file stores them."""
    return [(ts.stored(f.name, f.shape).tensor_type, f.shape)
            for part in (plan.qkv, plan.o, plan.gate_up or (), plan.down or ()) for f in part]


def _output(plan: _LayerPlan, ts: GGUFTensors, check: bool, release: bool = False):
    """A layer's w_o [n_head d_head, d_model], b_o [d_model] and post_attn_norm (Gemma 3's (gain,))
    alone, or None where it has none, as _expand reads them: what the value norms' Grams (once a
    model) and DLA of a layer without packed blocks need, a tenth of a layer."""
    b_o, post = plan.small.get("b_o"), plan.small.get("post_attn_norm")
    return (_matrix(plan.o, ts, check, release), None if b_o is None else ts.get(*b_o, check),
            None if post is None else (ts.get(*post, check),))


def _expand(plan: _LayerPlan, ts: GGUFTensors, cfg: ModelConfig, permuted: bool, check: bool,
            packed: PackedLayer | None = None, skip: frozenset = frozenset()) -> Layer:
    """A layer's float32 arrays from the file, as its plan says, with `packed` (its quantised
    matrices in the kernels' layout) beside them; the matrices named in `skip` are left None."""
    def matrix(name, fills):
        return None if name in skip else _matrix(fills, ts, check, release=packed is not None)

    vec = {k: ts.get(name, shape, check) for k, (name, shape) in plan.small.items()}
    biases = [vec.get("b_q"), vec.get("b_k"), vec.get("b_v")]
    if permuted and biases[0] is not None:
        biases[0], biases[1] = (unpermute_qk(biases[0], cfg.n_head),
                                unpermute_qk(biases[1], cfg.n_kv_head))
    w = {name: matrix(name, fills) for name, fills in _fills(plan).items()}
    norm = lambda key: (vec[key],) if key in vec else None  # noqa: E731
    return Layer(
        w_qkv=w["w_qkv"], b_qkv=cat_bias(biases), w_o=w["w_o"], b_o=vec.get("b_o"),
        norm1=norm("norm1"), norm2=norm("norm2"), w_in=w["w_in"], b_in=None, w_out=w["w_out"],
        b_out=None, q_norm=vec.get("q_norm"), k_norm=vec.get("k_norm"),
        post_attn_norm=norm("post_attn_norm"), post_mlp_norm=norm("post_mlp_norm"),
        packed=packed)


def _view(plan: _LayerPlan, ts: GGUFTensors, cfg: ModelConfig, permuted: bool, check: bool):
    """A layer's packed view (budget.LayerStore.packed_view): the matrices the kernels take in the
    file's blocks (their float32 fields None), the others (a type without a kernel) and the
    vectors float32; None where none of its matrices is packed."""
    packed = _packed_layer(plan, ts, check)
    skip = frozenset(name for name in MATRICES if getattr(packed, name) is not None)
    return _expand(plan, ts, cfg, permuted, check, packed, skip) if skip else None


def _expanded(view: Layer, plan: _LayerPlan, ts: GGUFTensors, check: bool) -> Layer:
    """A packed view with its packed matrices expanded to float32: the layer _expand builds (the
    same code writes the same values), sharing the view's vectors and its other matrices."""
    return dataclasses.replace(view, **{
        name: _matrix(fills, ts, check, release=True) for name, fills in _fills(plan).items()
        if fills is not None and getattr(view, name) is None})


def load_llama_gguf(cfg: ModelConfig, arch: str, ts: GGUFTensors, budget: int | None = None,
                    name: str | None = None, eager: bool = True, pack: bool = True) -> Weights:
    """GGUF tensors (llama.cpp names) -> the engine's Llama-family layout (Gemma 3 too: its four
    norms per layer). The layers stay in the file's type and are expanded to float32 within the
    memory budget (engine/reading/budget.py): `budget` bytes, else the one chosen, else the default.
    `eager`: expand (and check) the layers the budget keeps now; otherwise each layer is expanded
    and checked when a run first reaches it (a one-shot command that needs a few layers). Where the
    process asked for the kernels, the layers' matrices are packed (and checked) instead, and
    expanded only when asked for (module docstring). `pack`: False keeps the float32 path alone,
    even where the process asked for the kernels."""
    d = cfg.d_model
    permuted = arch in PERMUTED_QK
    plans = [_layer_plan(cfg, arch, ts, i) for i in range(cfg.n_layer)]
    sizes = [sum(ts.nbytes32(f.name) for part in (p.qkv, p.o, p.gate_up or (), p.down or ())
                 for f in part) + sum(ts.nbytes32(n) for n, _ in p.small.values()) for p in plans]
    # the few-row runs' quantised kernels read the layers' blocks packed (engine/computing/
    # qmatvec.py): each layer's packed view is held for the model's life, counted beside the
    # layers, and its float32 copy made only when asked for (a long run, a whole-matrix analysis)
    packing = pack and kernels_on()
    stored = [t for p in plans for t in _matrix_types(p, ts)] if packing else []
    packed = sum(packed_nbytes(qtype, *shape) for qtype, shape in stored)
    budget = resolve_budget(name or ts.path.name, sizes, float32_bytes_needed(cfg, ts) - sum(sizes)
                            + packed, budget, optional_bytes=grams_bytes(cfg))  # (Grams: on demand)

    def expand(i, check, view=None):  # (its packed view, if any, from the store: no reference to it)
        if view is None:
            return _expand(plans[i], ts, cfg, permuted, check)
        return _expanded(view, plans[i], ts, check)
    layers = LayerStore(expand, sizes, budget, ts.path.name,
                        output=lambda i, check: _output(plans[i], ts, check, release=packing),
                        packed=(lambda i, check: _view(plans[i], ts, cfg, permuted, check))
                        if packing else None, packed_bytes=packed)
    if eager:  # a model that fits: every layer read and checked at load (a packed one: its blocks)
        layers.read_views()
        layers.expand_kept()
        ts.release_again()
    tok_emb = ts.rows("token_embd.weight", (cfg.vocab_size, d))
    # the output head: kept quantised like the embedding (prediction dequantises it once, lazily);
    # no output.weight means it is tied to the token embedding
    out = ("output.weight", lambda: ts.rows("output.weight", (cfg.vocab_size, d)))
    head = read_head(lambda n: ts.get(n, (d,)), ("output_norm.weight",),
                     out if "output.weight" in ts else ("(tied to token_embd.weight)", lambda: tok_emb),
                     ts.path.name, ts.__contains__)
    if plans[-1].gate_up is None and head.missing is None:
        head = Head(head.norm, head.unembed, f"{ts.path.name} has no tensor "
                    f"'blk.{cfg.n_layer - 1}.ffn_up.weight' (the last layer's MLP)")
    return Weights(tok_emb=tok_emb, pos_emb=None, type_emb=None, emb_norm=None, layers=layers,
                   head=head, packed_types=frozenset(qtype for qtype, _ in stored if qtype in PACKED),
                   files=ts.files)


def float32_bytes_needed(cfg: ModelConfig, ts: GGUFTensors) -> int:
    """What the model's tensors take as float32, but the embedding and the output head, kept
    quantised (prediction dequantises the output head when first asked), and the RoPE frequency
    table."""
    return ts.float32_bytes(("token_embd.weight", "output.weight", "rope_freqs.weight"))


def gguf_tokenizer(reader: GGUFReader, n_rows: int | None = None, text: str | None = None
                   ) -> tuple[TextTokenizer | None, str | None]:
    """The tokenizer that tokenizer.ggml.* describes (byte-level BPE or SentencePiece, gguf_vocab),
    or (None, a one-line notice) when attnviz cannot build it (the model then takes typed token
    ids). Its arrays are checked (types, one entry per token) and, given the embedding's `n_rows`,
    every id must pick a row of it. `text`: the text a one-shot command will encode; a
    SentencePiece vocabulary then holds only the tokens and merges it can meet, read from the
    vocabulary's bytes (gguf_text_vocab.sentencepiece_for_text: the same tokens, ids, offsets and
    labels), until another text asks for the whole vocabulary."""
    with vocab.collector_paused():  # a large vocabulary's build makes a million objects, no cycle
        return _gguf_tokenizer(reader, n_rows, text)


def _gguf_tokenizer(reader: GGUFReader, n_rows: int | None, text: str | None
                    ) -> tuple[TextTokenizer | None, str | None]:
    source = source_name(reader)

    def typed(key, check, expected, default=None):
        value = metadata(reader, key, default)
        if value is not None and not check(value):
            raise refusal(source, key, show(value), expected)
        return value

    def list_of(*kinds):  # set(map(type)): a C loop, no Python per token
        return lambda value: isinstance(value, list) and set(map(type, value)) <= set(kinds)

    def flag(key, default):
        return bool(typed(key, lambda v: isinstance(v, (bool, np.bool_)), "true or false", default))

    def token_id(key, n_tokens):
        value = typed(key, is_whole, "a token id (a whole number)")
        if value is not None and not 0 <= value < n_tokens:
            raise refusal(source, key, f"{value:,}", f"a token id in 0..{n_tokens - 1:,}")
        return None if value is None else int(value)

    kind = typed("tokenizer.ggml.model", lambda v: isinstance(v, str), "a string such as 'gpt2'")
    pre = typed("tokenizer.ggml.pre", lambda v: isinstance(v, str), "a string such as 'llama-bpe'",
                "gpt2")
    if kind is None:
        return None, ("this GGUF holds no tokenizer (it sets no tokenizer.ggml.model): type token ids "
                      "instead, e.g. 5, 17, 3")
    if kind not in ("gpt2", "llama"):
        return None, (f"this GGUF's tokenizer ({kind}) is not supported yet (byte-level BPE "
                      "and SentencePiece only): type token ids instead, e.g. 5, 17, 3")
    if kind == "gpt2" and pre not in vocab.PRE_SPLITS:
        return None, (f"this GGUF's pre-tokenizer {pre!r} is not supported yet (supported: "
                      f"{', '.join(vocab.SUPPORTED_PRE)}): type token ids instead, e.g. 5, 17, 3")
    found = _text_table(reader, n_rows, kind) if text is not None else None
    if found is not None:  # a one-shot command's text: its tokens read from the vocabulary's bytes
        part = _tokenizer_for_text(reader, n_rows, kind == "llama", pre, text, found, flag,
                                   lambda key: token_id(key, len(found[0])))
        if part is not None:
            return part, None
    tokens = typed("tokenizer.ggml.tokens", list_of(str), "a list of token strings")
    if not tokens:
        return None, "this GGUF has no vocabulary (tokenizer.ggml.tokens): type token ids instead"
    types = typed("tokenizer.ggml.token_type",
                  list_of(int),
                  "a list of whole numbers, one per token") or [vocab.NORMAL] * len(tokens)
    scores = typed("tokenizer.ggml.scores", list_of(float, int), "a list of numbers")
    for key, values in (("tokenizer.ggml.token_type", types), ("tokenizer.ggml.scores", scores)):
        if values is not None and len(values) != len(tokens):
            raise ModelLoadError(f"{source} gives {key} {len(values):,} entries, but it must give one per "
                                 f"token of tokenizer.ggml.tokens ({len(tokens):,})")
    n_tokens = len(tokens)
    if n_rows is not None and len(tokens) > n_rows:
        raise ModelLoadError(
            f"{source} has {len(tokens):,} tokens in tokenizer.ggml.tokens, but its embedding "
            f"token_embd.weight has {n_rows:,} rows, so ids must be in 0..{n_rows - 1:,}")
    # llama.cpp's defaults where the file says nothing: a SentencePiece vocabulary adds BOS and
    # prefixes a space, a byte-level one does neither
    spm = kind == "llama"
    add_bos = flag("tokenizer.ggml.add_bos_token", spm)
    add_eos = flag("tokenizer.ggml.add_eos_token", False)
    bos = token_id("tokenizer.ggml.bos_token_id", n_tokens)
    eos = token_id("tokenizer.ggml.eos_token_id", n_tokens)
    if spm:
        if scores is None:
            raise refusal(source, "tokenizer.ggml.scores", None, "one score per token (SentencePiece "
                          "merges by them)")
        unk = token_id("tokenizer.ggml.unknown_token_id", n_tokens)
        space_prefix = flag("tokenizer.ggml.add_space_prefix", True)

        tok = vocab.sentencepiece_bpe(tokens, scores, types, space_prefix, unk)
        vocab.add_file_tokens(tok, tokens, types, (vocab.CONTROL, vocab.UNKNOWN))
    else:
        merges = typed("tokenizer.ggml.merges", list_of(str), "a list of 'left right' strings") or []
        try:
            tok = vocab.byte_level_bpe(tokens, merges, pre)
        except Exception as exc:  # tokenizers raises a bare Exception (a merge of unknown tokens)
            raise ModelLoadError(f"{source} gives tokenizer.ggml.merges that cannot be used with its "
                                 f"tokenizer.ggml.tokens ({exc})") from exc
        # control tokens (<|im_start|>, <|endoftext|>) match as whole tokens in typed text, as in
        # llama.cpp with parse_special; user-defined tokens too, without counting as special
        vocab.add_file_tokens(tok, tokens, types, (vocab.CONTROL,))
    vocab.add_bos_eos(tok, tokens, bos if add_bos else None, eos if add_eos else None,
                      fallback=None if spm else processors.ByteLevel(trim_offsets=False))
    return TextTokenizer(tok), None


def _tokenizer_for_text(reader: GGUFReader, n_rows: int | None, spm: bool, pre: str, text: str,
                        found, flag, token_id) -> TextTokenizer | None:
    """The tokenizer of the tokens and merges `text` can meet, from _text_table's `found`; None
    where the text is better served by the whole vocabulary. `flag(key, default)` and
    `token_id(key)` read and check the file's settings as the whole build does. Another text it
    does not cover gets its own the same way (TextTokenizer's `for_text`), while the whole one is
    built on the first text that cannot (or when asked for)."""
    bos, eos = token_id("tokenizer.ggml.bos_token_id"), token_id("tokenizer.ggml.eos_token_id")
    add_bos = flag("tokenizer.ggml.add_bos_token", spm)
    add_eos = flag("tokenizer.ggml.add_eos_token", False)
    settings = (token_id("tokenizer.ggml.unknown_token_id"),
                flag("tokenizer.ggml.add_space_prefix", True)) if spm else None
    for_text = text_vocab.text_builder(found, pre, settings, bos if add_bos else None,
                                       eos if add_eos else None)
    first = for_text(text)
    if first is None:
        return None
    table, _, types, _ = found
    special = (vocab.CONTROL, vocab.UNKNOWN) if spm else (vocab.CONTROL,)
    return TextTokenizer(first[0], whole=lambda: _whole_tokenizer(reader, n_rows), covers=first[1],
                         vocabulary=text_vocab.TableVocabulary(table, types, special),
                         for_text=for_text)


def _whole_tokenizer(reader: GGUFReader, n_rows: int | None):  # -> tokenizers.Tokenizer
    reader.mapped.check()  # (its strings are read from the mapped file: ModelFileChanged, not SIGBUS)
    return gguf_tokenizer(reader, n_rows)[0].raw


def _text_table(reader: GGUFReader, n_rows: int | None, kind: str):
    """(TokenTable, scores, types, merges) of a SentencePiece (`kind` llama: scores) or byte-level
    BPE vocabulary (gpt2: merges, a TokenTable of the "left right" strings, None where the file
    has none) whose arrays are as _gguf_tokenizer checks them (strings; whole numbers; numbers; one
    of each per token; no more tokens than `n_rows`), read without decoding its strings; None where
    any is not (the whole vocabulary's build then says which)."""
    found = string_bytes(reader, "tokenizer.ggml.tokens")
    if found is None or not len(found[1]):
        return None
    n = len(found[1])
    types = _numbers(reader, "tokenizer.ggml.token_type", "iu")
    if "tokenizer.ggml.token_type" not in reader.fields:
        types = np.full(n, vocab.NORMAL, np.int64)
    if types is None or len(types) != n or (n_rows is not None and n > n_rows):
        return None
    scores = merges = None
    if kind == "llama":
        scores = _numbers(reader, "tokenizer.ggml.scores", "iuf")
        if scores is None or len(scores) != n:
            return None
    elif "tokenizer.ggml.merges" in reader.fields:
        pairs = string_bytes(reader, "tokenizer.ggml.merges")
        if pairs is None:
            return None
        merges = text_vocab.TokenTable(*pairs) if len(pairs[1]) else None
    return text_vocab.TokenTable(*found), scores, types, merges


def _numbers(reader: GGUFReader, key: str, kinds: str) -> np.ndarray | None:
    """A metadata array of numbers of NumPy kinds `kinds` ("iuf": no booleans), copied out of the
    file (a tokenizer reads it after load: a view of the map would read a file changed since);
    None where `key` is no such array."""
    field = reader.fields.get(key)
    if field is None or len(field.types) != 2 or field.types[0] != GGUFValueType.ARRAY:
        return None
    values = field.parts[field.data[0]] if len(field.data) == 1 else None
    if not isinstance(values, np.ndarray) or values.dtype.kind not in kinds or values.ndim != 1:
        return None
    return np.array(values)


def read_gguf(path: Path, name: str | None = None, license: str | None = None,
              budget: int | None = None, eager: bool = True, text: str | None = None,
              packing=None) -> ReadModel:
    """Read a GGUF model file: config from its metadata, tokenizer built, layers expanded to float32
    within the memory budget (`budget` bytes, else the one chosen, else the default); `eager=False`
    leaves each layer in the file until a run first needs it. `text`: the text a one-shot command
    will encode (gguf_tokenizer). `packing`: called with the block types the layers will be packed
    in (Weights.packed_types, maybe none) once they are known, before the tokenizer is built and any
    layer is read (a loader starts the kernels for them meanwhile)."""
    path = Path(path).expanduser()
    reader = open_gguf(path)
    arch = architecture(reader)
    cfg = gguf_config(reader)
    ts = GGUFTensors(reader, path)
    beyond = check_counts(reader, arch, cfg, ts)  # (more layers than block_count: warned)
    weights = load_llama_gguf(cfg, arch, ts, budget, name or path.name, eager=False)  # no layer read
    if packing is not None:
        packing(weights.packed_types)
    if eager:  # the layers' buffer faulted in beside the tokenizer's build, which holds the GIL
        weights.layers.prepare_kept()
    try:
        tokenizer, notice = gguf_tokenizer(reader, cfg.vocab_size, text)  # checked before the weights
    except BaseException:
        weights.layers.drop_prepared()
        raise
    if notice:
        log.info("%s: %s", path.name, notice)
    if eager:  # a model that fits: every layer read and checked at load (load_llama_gguf's eager)
        weights.layers.read_views()
        weights.layers.expand_kept()
        ts.release_again()
    file_license = metadata(reader, "general.license")
    return ReadModel(name or gguf_display_name(reader, path), path, cfg, weights, tokenizer,
                     license=license or (file_license if isinstance(file_license, str) else None),
                     notice="; ".join(filter(None, (beyond, notice))) or None)
