"""The engine's one layout of a model's weights, as every loader builds it (engine/reading/
safetensors_model.py, engine/reading/gguf_model.py) and the forward pass reads it
(engine/computing/families.py): float32, every projection `[d_in, d_out]` (so `x @ w`), Q/K/V fused
into one `[d_model, (n_head + 2 n_kv_head) d_head]` matrix. `ReadModel` is what a loader read from a
folder or a file; engine/computing/load.py builds a `Model` from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.config import ModelConfig
from attnviz.engine.reading.tokenizer import TextTokenizer


def kept_in_c_order(n_in: int, n_out: int) -> bool:
    """The one rule for how a layer matrix [in, out] is kept: C order where out >= in, else as
    [out, in] rows (its Fortran-order view): its longer side contiguous, the layout OpenBLAS's
    matrix-vector product (a cached keystroke's) streams fastest (benchmarks/row_products.py
    --layouts measures both). The loaders of decoders apply it (gguf_model._matrix,
    safetensors_model._in_out)."""
    return n_out >= n_in


@dataclass(frozen=True)
class Layer:
    w_qkv: np.ndarray  # [d_model, (n_head + 2 n_kv_head) d_head]
    b_qkv: np.ndarray | None
    w_o: np.ndarray  # [n_head d_head, d_model]
    b_o: np.ndarray | None
    norm1: tuple  # (gain, bias) or (gain,)
    norm2: tuple
    w_in: np.ndarray  # [d_model, d_ff] (llama: [d_model, 2 d_ff], gate | up)
    b_in: np.ndarray | None
    w_out: np.ndarray  # [d_ff, d_model]
    b_out: np.ndarray | None
    q_norm: np.ndarray | None = None  # [d_head] gain of the per-head RMSNorm on q (Qwen3, Gemma 3)
    k_norm: np.ndarray | None = None  # [d_head] same on k
    post_attn_norm: tuple | None = None  # Gemma 3: (gain,) on the attention output, before the add
    post_mlp_norm: tuple | None = None  # Gemma 3: (gain,) on the MLP output, before the add
    packed: object | None = None  # qpack.PackedLayer: the matrices in the file's blocks (few-row runs)


@dataclass(frozen=True)
class Head:
    """What turns the residual stream into next-token logits: the final norm and the unembedding
    W_U [vocab, d_model] (rows = tokens; the token embedding itself when tied). `missing`: one
    clause naming what the file lacks or holds broken ("m.gguf has no final norm output_norm.weight",
    "its unembedding lm_head.weight has shape [...], but ..."), when `norm` or `unembed` is
    None; prediction refuses with "<model> predicts no next token because <missing>"."""
    norm: tuple | None  # (gain, bias) or (gain,)
    unembed: object | None  # [vocab, d_model]: an array, a memory map or GGUF QuantRows
    missing: str | None = None


@dataclass(frozen=True)
class Weights:
    tok_emb: np.ndarray  # [vocab, d_model]: memory-mapped (F32), or a RowTable / QuantRows that
    # converts the rows a run uses (F16, BF16, GGUF's quantised types)
    pos_emb: np.ndarray | None  # [max_positions, d_model]
    type_emb: np.ndarray | None  # [type_vocab, d_model]
    emb_norm: tuple | None  # BERT's embedding LayerNorm
    layers: Sequence[Layer]  # a LayerStore (expanded within the memory budget) or a tuple
    head: Head | None = None  # final norm and unembedding (None: the loader reads none)
    packed_types: frozenset = frozenset()  # the block types its layers are packed in for the kernels
    files: tuple = ()  # the files its arrays map (mapped_files.MappedFile), checked before each run
    notice: str | None = None  # one line for the user on what the loader left unread


def cat_bias(parts):
    if all(p is None for p in parts):
        return None
    if any(p is None for p in parts):
        raise ModelLoadError("checkpoint has biases for some of Q/K/V but not all")
    return np.concatenate(parts).astype(np.float32)


def read_head(get, norm_names: tuple[str, ...], unembed: tuple[str, object], source: str,
              present) -> Head:
    """The final norm (its tensors named `norm_names`, read with `get(name)`) and the unembedding
    (`unembed`: (its name, a zero-argument reader)). A missing or broken tensor leaves the model
    usable for attention: Head.missing names it and prediction refuses with that line. A tensor
    the model's weights lack (`present(name)` false) is said to be missing from `source` (a GGUF
    file, a safetensors checkpoint's folder, whose shards hold it together); one they hold that
    cannot be used (its shape, type or values) is said to be unusable, and why."""
    norm = []
    for n in norm_names:
        try:
            norm.append(np.array(get(n)))
        except ModelLoadError as exc:
            return Head(None, None, _why("final norm", n, source, present, exc))
    name, read = unembed
    try:
        w_u = read()
    except ModelLoadError as exc:
        return Head(tuple(norm), None, _why("unembedding", name, source, present, exc))
    return Head(tuple(norm), w_u)


def _why(what: str, name: str, source: str, present, exc: ModelLoadError) -> str:
    """One clause on why tensor `name` (the model's `what`) is of no use: "<source> has no final
    norm model.norm.weight", or "its final norm model.norm.weight has shape [63], but ..." from
    the loader's line on the tensor ("tensor model.norm.weight has shape ...")."""
    if not present(name):
        return f"{source} has no {what} {name}"
    line = _one_line(exc)
    at = line.find(f"tensor {name}")
    if at < 0:
        return f"its {what} {name} cannot be read ({line})"
    return f"its {what} {name}{line[at + len(f'tensor {name}'):]}"


def _one_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


@dataclass(frozen=True)
class ReadModel:
    """What a loader read from a model folder or file: enough to build a Model
    (engine/computing/load.py)."""
    name: str
    path: Path
    config: ModelConfig
    weights: Weights
    tokenizer: TextTokenizer | None
    license: str | None = None
    notice: str | None = None  # one line for the user, e.g. why there is no tokenizer
