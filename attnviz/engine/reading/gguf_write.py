"""Writing a model to a GGUF file at one of GGUF's types, with gguf.GGUFWriter.

From a GGUF file: its metadata (architecture, tokenizer, everything but the file type) is copied,
and every tensor is dequantised and written again at the type. From a safetensors folder: written
as llama.cpp's convert_hf_to_gguf.py writes it: its tensor names (gguf's TensorNameMap), Q and K
rows permuted for its RoPE in the Llama architecture (Mistral is written as Llama, as there),
Gemma's norm gains stored as 1 + w, llama3 RoPE scaling as a rope_freqs tensor, and a byte-level
BPE tokenizer.json as `tokenizer.ggml.*` (model gpt2, its pre-tokenizer by name:
gguf_write_tokenizer.py).

Which tensor gets which type: engine/reading/quantize.py (2-D weights at the type, F16 where their
rows do not fit its blocks, 1-D tensors at F32). Only architectures attnviz's GGUF reader opens
are written, and the written header is read back before the file is kept: a model whose config
would read back different (a field GGUF has no key for) is refused, naming the field.

Tensors are converted and written one at a time. The file is written under a temporary name in
the same folder and renamed into place at the end: a failure at any point leaves no file."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.reading.config import ModelConfig, Rope, read_config
from attnviz.engine.reading.file_write import temp_beside
from attnviz.engine.reading.gguf_file import (
    ARCHITECTURES,
    architecture,
    gguf_config,
    is_gguf,
    open_gguf,
)
from attnviz.engine.reading.quantize import (
    FALLBACK,
    QUANT_TYPES,
    is_quantized,
    quant_type,
    quantize_rows,
    stored_type,
    tensor_values,
)
from attnviz.engine.reading.gguf_write_tokenizer import hf_tokenizer_kv
from attnviz.engine.reading.safetensors_model import check_vocab, too_few
from attnviz.engine.reading.validate import blocks_held, exists, os_reason
from attnviz.engine.reading.weights import Checkpoint

log = logging.getLogger(__name__)

Q = GGMLQuantizationType
WRITE_TYPES = QUANT_TYPES + ("F32",)  # F32: a plain conversion, nothing rounded
# config.json model_type -> the GGUF architecture llama.cpp's converter writes it as
HF_ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3",
           "gemma3_text": "gemma3", "gemma3": "gemma3"}
FILE_TYPES = {Q.F32: gguf.LlamaFileType.ALL_F32, Q.F16: gguf.LlamaFileType.MOSTLY_F16,
              Q.BF16: gguf.LlamaFileType.MOSTLY_BF16, Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
              Q.Q5_1: gguf.LlamaFileType.MOSTLY_Q5_1, Q.Q5_0: gguf.LlamaFileType.MOSTLY_Q5_0,
              Q.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1, Q.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0}
# metadata the writer sets itself, never copied from a GGUF source
_OWN_KEYS = ("general.architecture", "general.file_type", "general.quantization_version",
             "general.alignment")
_INTEGER = {Q.I8, Q.I16, Q.I32, Q.I64}


@dataclass
class Written:
    """What write_gguf wrote: the file, its size, tensors per stored type, the matrices kept at F16
    (name -> row length) and one-line notices (what could not be carried over)."""
    path: Path
    qtype: str
    n_bytes: int
    counts: dict = field(default_factory=dict)
    kept_f16: dict = field(default_factory=dict)
    notices: list = field(default_factory=list)


@dataclass(frozen=True)
class _Tensor:  # one tensor to write: GGUF name, NumPy shape, stored type, its float32 values
    name: str
    shape: tuple
    stored: GGMLQuantizationType
    values: Callable[[], np.ndarray]


def write_gguf(source, qtype: str, out, name: str | None = None) -> Written:
    """Write the model at `source` (a GGUF file or a safetensors folder) to `out` with its weight
    matrices at `qtype` (WRITE_TYPES). InputError: an unknown type, an output that cannot be
    written; ModelLoadError: a source that does not open or cannot be written as a GGUF attnviz
    reads. Nothing is left at `out` (or beside it) unless the whole file was written."""
    qt = quant_type(qtype, WRITE_TYPES)
    out = Path(out).expanduser()
    check_output(out)
    source = Path(source).expanduser()
    if source.is_file() and is_gguf(source):
        arch, kv, tensors, src_cfg, notices = _from_gguf(source, qt)
    elif source.is_dir():
        arch, kv, tensors, src_cfg, notices = _from_folder(source, qt, name or source.name)
    elif not exists(source):
        raise ModelLoadError(f"no model at {source}")
    else:
        raise ModelLoadError(f"{source.name} is neither a GGUF file nor a model folder")
    written = Written(out, qt.name, 0, notices=notices)
    for t in tensors:
        written.counts[t.stored.name] = written.counts.get(t.stored.name, 0) + 1
        if t.stored == FALLBACK != qt and len(t.shape) == 2 and is_quantized(t.name, t.shape):
            written.kept_f16[t.name] = t.shape[-1]
    tmp = None
    try:
        fd, tmp = temp_beside(out, ".part")  # in the try: a folder that takes no file is named
        os.close(fd)
        _write(tmp, arch, kv, tensors, qt)
        _check_reads_back(tmp, src_cfg)
        os.replace(tmp, out)
    except OSError as exc:
        raise InputError(f"cannot write {out}: {os_reason(exc)}") from exc
    finally:
        if tmp is not None and tmp.exists():
            tmp.unlink()
    written.n_bytes = out.stat().st_size
    return written


def check_output(out: Path) -> None:
    """InputError unless `out` names a file that can be written: its folder exists and takes new
    files, and it is not a folder itself."""
    folder = out.parent
    if out.is_dir():
        raise InputError(f"cannot write {out}: it is a folder; give a file name such as model.Q8_0.gguf")
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise InputError(f"cannot write {out}: the folder {folder} {what}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"cannot write {out}: the folder {folder} is not writable")
    if out.exists() and not stat.S_ISREG(out.stat().st_mode):
        raise InputError(f"cannot write {out}: it exists and is not a regular file (a FIFO, device "
                         "or socket)")


def _nbytes(shape: tuple, stored: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[stored]
    return int(np.prod(shape[:-1], dtype=np.int64)) * (shape[-1] // block) * size


def _encoded(t: _Tensor) -> np.ndarray:
    """A tensor's bytes as written: quantized rows, F16, or the F32/integer values."""
    values = t.values()
    if t.stored in _INTEGER:
        return values
    if t.stored in (Q.F32,):
        return np.ascontiguousarray(values, dtype=np.float32)
    rows = values.reshape(-1, t.shape[-1])
    data, used = quantize_rows(rows, t.stored)
    assert used == t.stored, (t.name, used, t.stored)
    return data


def _write(path: Path, arch: str, kv: list, tensors: list, qt: GGMLQuantizationType) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    try:
        for key, value, vtype, sub in kv:
            w.add_key_value(key, value, vtype, sub)
        w.add_file_type(int(FILE_TYPES[qt]))
        if qt not in (Q.F32, Q.F16, Q.BF16):
            w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        for t in tensors:
            if t.stored in _INTEGER:
                dtype = {Q.I8: np.int8, Q.I16: np.int16, Q.I32: np.int32, Q.I64: np.int64}[t.stored]
                w.add_tensor_info(t.name, t.shape, np.dtype(dtype), _nbytes(t.shape, t.stored))
            elif t.stored in (Q.F32, Q.F16):
                dtype = np.float32 if t.stored == Q.F32 else np.float16
                w.add_tensor_info(t.name, t.shape, np.dtype(dtype), _nbytes(t.shape, t.stored))
            else:  # block types and BF16: bytes per row
                block, size = GGML_QUANT_SIZES[t.stored]
                byte_shape = (*t.shape[:-1], t.shape[-1] // block * size)
                w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), _nbytes(t.shape, t.stored),
                                  raw_dtype=t.stored)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in tensors:  # one at a time: memory holds one tensor's values and bytes
            w.write_tensor_data(_encoded(t))
    finally:
        w.close()


def _tensor(name: str, shape: tuple, qt: GGMLQuantizationType, values: Callable) -> _Tensor:
    """The entry for a float tensor: 2-D weights at `qt` (F16 when their rows do not fit), F32
    otherwise."""
    stored = stored_type(qt, shape[-1]) if is_quantized(name, shape) else Q.F32
    return _Tensor(name, tuple(int(n) for n in shape), stored, values)


# from a GGUF file


def _from_gguf(path: Path, qt: GGMLQuantizationType):
    """-> (arch, metadata [(key, value, type, item type)], tensors, the source's config, notices)."""
    reader = open_gguf(path)
    arch = architecture(reader)  # refuses one attnviz does not read
    cfg = gguf_config(reader)
    kv, notices = [], []
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key in _OWN_KEYS:
            continue
        main = f.types[0]
        sub = f.types[1] if main == GGUFValueType.ARRAY and len(f.types) > 1 else None
        if sub == GGUFValueType.ARRAY:  # arrays of arrays: none of the keys attnviz or llama.cpp read
            notices.append(f"metadata {key} (an array of arrays) is not copied")
            continue
        value = f.contents()
        if main == GGUFValueType.ARRAY and sub is None:  # an empty array of unknown type
            continue
        kv.append((key, value, main, sub))
    tensors = []
    for t in reader.tensors:
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        if t.tensor_type in _INTEGER:
            tensors.append(_Tensor(t.name, shape, t.tensor_type,
                                   lambda t=t, shape=shape: np.asarray(t.data).reshape(shape)))
            continue
        tensors.append(_tensor(t.name, shape, qt, lambda t=t, shape=shape: tensor_values(t, shape)))
    return arch, kv, tensors, cfg, notices


# from a safetensors folder


def permute(w: np.ndarray, n_head: int) -> np.ndarray:  # [n_head d_head, ...] -> same shape
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.permute: each head's rows from Hugging Face's
    rotate-half order to the adjacent pairs its RoPE rotates (gguf_tensors.unpermute_qk undoes it)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def _kv(key: str, value, vtype: GGUFValueType, sub: GGUFValueType | None = None) -> tuple:
    return key, value, vtype, sub


def _from_folder(folder: Path, qt: GGMLQuantizationType, name: str):
    cfg = read_config(folder)
    arch = HF_ARCH.get(cfg.model_type)
    if arch is None:
        readable = ", ".join(sorted(ARCHITECTURES))
        raise ModelLoadError(
            f"{name}: a {cfg.model_type} model is not written to GGUF: attnviz opens GGUF files of "
            f"{readable} only, so the file could not be read back here")
    ckpt = Checkpoint(folder)
    kv = _config_kv(cfg, arch, name)
    tok_kv, notice = hf_tokenizer_kv(folder, cfg)
    kv += tok_kv
    notices = [notice] if notice else []
    tensors = _folder_tensors(cfg, arch, ckpt, qt)
    _check_counts(cfg, ckpt, tensors)
    rope = cfg.rope
    if rope is not None and rope.kind == "llama3":  # llama.cpp stores it as one divisor a frequency
        divisors = llama3_divisors(rope, cfg.d_head)
        tensors.append(_Tensor("rope_freqs.weight", divisors.shape, Q.F32, lambda d=divisors: d))
    return arch, kv, tensors, cfg, notices


def _check_counts(cfg: ModelConfig, ckpt: Checkpoint, tensors: list) -> None:
    """The folder's layers and vocabulary against its config.json, as loading it checks them: a
    file of more layers than its tensors, or another vocabulary, would be written, then refused."""
    held = blocks_held([t.name for t in tensors], cfg.n_layer)
    if held is not None:
        raise too_few(cfg, ckpt, held)
    embedding = next((hf for hf in ckpt.names() if hf.endswith("embed_tokens.weight")), None)
    if embedding is not None:
        check_vocab(cfg, ckpt, embedding)


def llama3_divisors(rope: Rope, d_head: int) -> np.ndarray:  # -> float32 [d_head / 2]
    """llama.cpp's convert_hf_to_gguf.py LlamaModel.generate_extra_tensors: the llama3 RoPE scaling
    as one divisor per frequency (the rope_freqs tensor): 1 for the fast frequencies, `factor` for
    the slow ones, a blend between."""
    freqs = 1.0 / (rope.theta ** (np.arange(0, d_head, 2, dtype=np.float32) / d_head))
    old, low, high = rope.original_max_positions, rope.low_freq_factor, rope.high_freq_factor
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(rope.factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / rope.factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _config_kv(cfg: ModelConfig, arch: str, name: str) -> list:
    """The architecture's metadata, the keys llama.cpp's converter writes (gguf.Keys)."""
    K, U32, F32 = gguf.Keys, GGUFValueType.UINT32, GGUFValueType.FLOAT32
    def a(key):
        return key.format(arch=arch)
    kv = [_kv(K.General.NAME, name, GGUFValueType.STRING),
          _kv(a(K.LLM.BLOCK_COUNT), cfg.n_layer, U32),
          _kv(a(K.LLM.CONTEXT_LENGTH), cfg.max_positions, U32),
          _kv(a(K.LLM.EMBEDDING_LENGTH), cfg.d_model, U32),
          _kv(a(K.LLM.FEED_FORWARD_LENGTH), cfg.d_ff, U32),
          _kv(a(K.Attention.HEAD_COUNT), cfg.n_head, U32),
          _kv(a(K.Attention.HEAD_COUNT_KV), cfg.n_kv_head, U32),
          _kv(a(K.Attention.LAYERNORM_RMS_EPS), float(cfg.norm_eps), F32),
          _kv(a(K.Attention.KEY_LENGTH), cfg.d_head, U32),
          _kv(a(K.Attention.VALUE_LENGTH), cfg.d_head, U32),
          _kv(a(K.Rope.DIMENSION_COUNT), cfg.d_head, U32),
          _kv(a(K.LLM.VOCAB_SIZE), cfg.vocab_size, U32)]
    rope = cfg.rope
    if rope is not None:
        kv.append(_kv(a(K.Rope.FREQ_BASE), float(rope.theta), F32))
        if rope.kind in ("linear", "yarn"):
            kv += [_kv(a(K.Rope.SCALING_TYPE), rope.kind, GGUFValueType.STRING),
                   _kv(a(K.Rope.SCALING_FACTOR), float(rope.factor), F32)]
        if rope.kind == "yarn":
            kv += [_kv(a(K.Rope.SCALING_ORIG_CTX_LEN), rope.original_max_positions, U32),
                   _kv(a(K.Rope.SCALING_YARN_BETA_FAST), float(rope.beta_fast), F32),
                   _kv(a(K.Rope.SCALING_YARN_BETA_SLOW), float(rope.beta_slow), F32)]
    if cfg.sliding_window:
        kv.append(_kv(a(K.Attention.SLIDING_WINDOW), int(cfg.sliding_window), U32))
        if cfg.family == "gemma3":  # which layers are local, one flag each
            kv.append(_kv(a(K.Attention.SLIDING_WINDOW_PATTERN), [cfg.is_local(i) for i in range(cfg.n_layer)],
                          GGUFValueType.ARRAY, GGUFValueType.BOOL))
    eos = cfg.raw.get("eos_token_id")
    if isinstance(eos, int) and not isinstance(eos, bool) and 0 <= eos < cfg.vocab_size:
        kv.append(_kv(K.Tokenizer.EOS_ID, eos, U32))
    return kv


def _folder_tensors(cfg: ModelConfig, arch: str, ckpt: Checkpoint, qt: GGMLQuantizationType) -> list:
    """The checkpoint's tensors under llama.cpp's names, as its converter changes them."""
    model_arch = next(k for k, v in gguf.MODEL_ARCH_NAMES.items() if v == arch)
    names = gguf.get_tensor_name_map(model_arch, cfg.n_layer)
    tied = cfg.raw.get("tie_word_embeddings", cfg.family == "gemma3") is True
    out = []
    for hf in ckpt.names():
        if "vision_tower" in hf or "multi_modal_projector" in hf:  # llama.cpp writes these apart (mmproj)
            continue
        if tied and hf == "lm_head.weight":  # the output head is the token embedding
            continue
        new = names.get_name(hf, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise ModelLoadError(f"{ckpt.files[0].path.name}: tensor {hf} has no name in llama.cpp's "
                                 f"{arch} architecture, so it cannot be written to GGUF")
        change = None
        if arch == "llama" and new.endswith(("attn_q.weight", "attn_q.bias")):
            def change(w):
                return permute(w, cfg.n_head)
        elif arch == "llama" and new.endswith(("attn_k.weight", "attn_k.bias")):
            def change(w):
                return permute(w, cfg.n_kv_head)
        elif cfg.family == "gemma3" and hf.endswith("norm.weight"):
            def change(w):
                return w + np.float32(1.0)
        shape = ckpt.shape(hf)

        def values(hf=hf, shape=shape, change=change):
            w = np.asarray(ckpt.get(hf, shape), dtype=np.float32)
            return np.ascontiguousarray(change(w) if change is not None else w)

        out.append(_tensor(new, shape, qt, values))
    return out


# the written file read back


def _check_reads_back(path: Path, want: ModelConfig) -> None:
    """ModelLoadError naming the first field of `want` that the written file's header reads back
    as something else (a config GGUF has no key for)."""
    got = gguf_config(open_gguf(path))
    for label, a, b in _config_fields(want, got):
        same = (math.isclose(a, b, rel_tol=1e-6) if isinstance(a, float) and isinstance(b, float)
                else a == b)
        if not same:
            raise ModelLoadError(f"this model cannot be written to GGUF as it is: its {label} is "
                                 f"{a}, but a GGUF file of it would be read as {b}")


def _config_fields(a: ModelConfig, b: ModelConfig):
    for label in ("n_layer", "n_head", "n_kv_head", "d_model", "d_head", "d_ff", "vocab_size",
                  "max_positions", "norm_eps", "sliding_window", "layer_types", "qk_norm", "causal",
                  "activation"):
        x, y = getattr(a, label), getattr(b, label)
        yield label, (float(x) if isinstance(x, float) else x), (float(y) if isinstance(y, float) else y)
    def scale(c):
        return float(c.query_pre_attn_scalar or c.d_head)
    yield "query_pre_attn_scalar", scale(a), scale(b)
    for label in ("rope", "rope_local"):
        x, y = getattr(a, label), getattr(b, label)
        yield label, _rope_line(x), (_rope_line(x) if _same_rope(x, y, a.d_head) else _rope_line(y))


def _rope_line(rope: Rope | None) -> str:
    return "none" if rope is None else rope.describe()


def _same_rope(x: Rope | None, y: Rope | None, d_head: int) -> bool:
    """Whether a read-back RoPE `y` is the written `x`: every field alike (floats to float32's
    precision), llama3 scaling read back as the rope_freqs divisors llama3_divisors wrote."""
    if x is None or y is None:
        return x is y
    if x.kind == "llama3":
        return (y.kind == "factors" and math.isclose(x.theta, y.theta, rel_tol=1e-6)
                and np.allclose(y.freq_divisors, llama3_divisors(x, d_head), rtol=1e-6))
    for f in dataclasses.fields(Rope):
        u, v = getattr(x, f.name), getattr(y, f.name)
        if isinstance(u, float) and isinstance(v, (int, float)):
            if not math.isclose(u, float(v), rel_tol=1e-6):
                return False
        elif isinstance(u, tuple):
            if len(u) != len(v) or not np.allclose(u, v, rtol=1e-6):
                return False
        elif u != v:
            return False
    return True
