"""Reading GGUF files (llama.cpp, LM Studio, Ollama) into the engine's one layout.

The `gguf` package (maintained in the llama.cpp repository) parses the file and dequantises every
tensor type it knows (`gguf.quants`); this module maps the metadata to a `ModelConfig`, undoes
llama.cpp's Q/K row permutation so the engine keeps one RoPE (rotate-half), and builds the
tokenizer from `tokenizer.ggml.*` with the `tokenizers` library.

Memory: the tensors stay in the file's type, memory-mapped. Each layer is dequantised to float32
when it runs, and as many expanded layers are kept as the memory budget allows (`LayerStore`,
engine/reading/budget.py: all of them for a model that fits, read at load). The token embedding
stays quantised and only the rows a run needs are dequantised (`QuantRows`): SmolLM2's 49,152 x 576
table is 30 MB in Q4_1, 113 MB as float32.
"""

from __future__ import annotations

import logging
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField
from gguf.quants import dequantize
from tokenizers import processors

from attnviz.engine.reading.config import ModelConfig, config_from_dict
from attnviz.engine.reading.dequant import dequantize_into, prepare
from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading import gguf_vocab as vocab
from attnviz.engine.reading.tokenizer import TextTokenizer
from attnviz.engine.parallel import cores, in_threads
from attnviz.engine.reading.layout import (
    Head, Layer, ReadModel, Weights, cat_bias, kept_in_c_order, read_head,
)
from attnviz.engine.reading.validate import (
    cannot_read, check_finite, check_shape, exists, file_kind, is_whole, regular_file, show,
)
from attnviz.engine.reading.budget import LayerStore, float32_array, resolve_budget

log = logging.getLogger(__name__)

GGUF_MAGIC = b"GGUF"
# general.architecture -> the model_type whose forward pass serves it
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3",
                 "phi3": "phi3", "gemma3": "gemma3_text"}
# llama.cpp's converter permutes Q/K rows for its interleaved RoPE in these architectures only
# (Qwen2, Qwen3, Phi-3 and Gemma 3 use NeoX-style RoPE, which is already rotate-half).
PERMUTED_QK = {"llama", "mistral"}


def is_gguf(path: Path) -> bool:
    """True when the file starts with the GGUF magic (Ollama's blobs have no extension). Only a
    regular file is opened: reading a FIFO would block."""
    try:
        if file_kind(Path(path)) is not None:
            return False
        with open(path, "rb") as fh:
            return fh.read(4) == GGUF_MAGIC
    except (OSError, ModelLoadError):
        return False


_ARRAY = int(GGUFValueType.ARRAY)
_ITEMSIZE = {t: np.dtype(t).itemsize for t in (np.uint8, np.int8, np.uint16, np.int16, np.uint32,
                                                np.int32, np.float32, np.uint64, np.int64, np.float64,
                                                np.bool_)}


class _Reader(GGUFReader):
    """GGUFReader with bounds checks and a plain-ndarray view of the file.

    The checks turn a truncated file or an absurd length into one clear error before anything large
    is allocated (the stock reader can loop for a very long time over a corrupt array length). The
    plain view skips np.memmap's per-slice bookkeeping, and metadata arrays are read in one pass
    (below), not item by item (benchmarks/smollm2.py measures the header's parse).
    """

    def __init__(self, path, *args, **kwargs):
        self.path = Path(path)  # for messages: the file a field or tensor comes from
        super().__init__(path, *args, **kwargs)

    @property
    def data(self) -> np.ndarray:
        return self._data

    @data.setter
    def data(self, value: np.ndarray) -> None:
        self._data = value.view(np.ndarray)

    def _get(self, offset, dtype, count=1, override_order=None):
        count = int(count)
        size = _ITEMSIZE.get(dtype) or np.dtype(dtype).itemsize
        end = offset + size * count
        if count < 0 or end > self._data.size:
            raise _Corrupt(f"the file ends at byte {self._data.size:,}, but its contents need bytes "
                           f"up to {end:,}: a download that did not finish, or not a GGUF file")
        return super()._get(offset, dtype, count, override_order)

    def _get_field_parts(self, orig_offs, raw_type):
        if int(raw_type) != _ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        raw_itype = self._get(orig_offs, np.uint32)
        alen = self._get(orig_offs + 4, np.uint64)
        item_type, n = int(raw_itype[0]), int(alen[0])
        try:
            gtype = GGUFValueType(item_type)
        except ValueError:
            raise _Corrupt(f"a metadata array has unknown item type {item_type}") from None
        scalar = self.gguf_scalar_to_np.get(gtype)
        min_size = np.dtype(scalar).itemsize if scalar is not None else 8  # a string: its length
        room = self._data.size - orig_offs - 12
        if n * min_size > room:
            raise _Corrupt(f"a metadata array claims {n:,} items, more than the {room:,} bytes "
                           "left in the file can hold")
        # The stock reader walks arrays item by item through NumPy, slow for a vocabulary of tens
        # of thousands of tokens. Same parts, made faster: scalars as one array part (contents()
        # returns the same list), strings as (length, bytes) parts found with struct.
        offs = orig_offs + 12
        if scalar is not None:
            values = self._get(offs, scalar, n)
            return 12 + int(values.nbytes), [raw_itype, alen, values], [2], [GGUFValueType.ARRAY, gtype]
        if gtype != GGUFValueType.STRING:  # arrays of arrays: rare, left to the stock reader
            self._nested = getattr(self, "_nested", 0) + 1  # (its string arrays: parts made now)
            try:
                return super()._get_field_parts(orig_offs, raw_type)
            finally:
                self._nested -= 1
        host_little = sys.byteorder == "little"
        order = "<" if (self.byte_order == "I") == host_little else ">"
        unpack = struct.Struct(order + "Q").unpack_from
        data, size = self._data, self._data.size
        ends = []  # where each string ends (the next one's length starts there)
        for _ in range(n):
            if offs + 8 > size:
                raise _Corrupt(f"a string array runs past the end of the file ({size:,} bytes)")
            end = offs + 8 + unpack(data, offs)[0]
            if end > size:
                raise _Corrupt(f"a string at byte {offs:,} runs past the end of the file ({size:,} bytes)")
            ends.append(end)
            offs = end
        if getattr(self, "_nested", 0):  # an item of an array of arrays: the stock reader's parts
            parts, idxs, begin = [raw_itype, alen], [], orig_offs + 12
            for end in ends:
                parts += [self._get(begin, np.uint64), data[begin + 8:end]]
                idxs.append(len(parts) - 1)
                begin = end
            return offs - orig_offs, parts, idxs, [GGUFValueType.ARRAY, GGUFValueType.STRING]
        # its (length, bytes) parts are made when asked for, and contents() decodes the strings
        # from one copy of the array's bytes: a view per part (two per string) would be most of
        # a header's parse and their decoding most of its tokenizer's build (_push_field)
        self._strings = _StringParts(self, orig_offs + 12, ends)
        return offs - orig_offs, [raw_itype, alen], [], [GGUFValueType.ARRAY, GGUFValueType.STRING]

    def _push_field(self, field, skip_sum: bool = False) -> int:
        strings, self._strings = getattr(self, "_strings", None), None
        if strings is not None and field.types == [GGUFValueType.ARRAY, GGUFValueType.STRING]:
            parts = strings.after(field.parts)
            field = _StringArrayField(field.offset, field.name, parts,
                                      range(len(field.parts) + 1, len(parts), 2), field.types)
        return super()._push_field(field, skip_sum)


class _StringParts(Sequence):
    """A metadata string array's parts as gguf's reader lists them (the field's own parts, then a
    length and a bytes view of the file per string), each made when indexed; `strings()` decodes
    every string once (UTF-8, strict, as gguf's contents()) from one copy of the array's bytes."""

    def __init__(self, reader: _Reader, start: int, ends: list[int], head: tuple = ()):
        self._reader, self._start, self._ends, self._head = reader, start, ends, head
        self._decoded: list[str] | None = None

    def after(self, head) -> _StringParts:  # the same strings behind the field's own parts
        return _StringParts(self._reader, self._start, self._ends, tuple(head))

    def __len__(self) -> int:
        return len(self._head) + 2 * len(self._ends)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i < len(self._head):
            return self._head[i]
        k, is_bytes = divmod(i - len(self._head), 2)
        begin = self._start if k == 0 else self._ends[k - 1]
        if is_bytes:
            return self._reader.data[begin + 8:self._ends[k]]
        return self._reader._get(begin, np.uint64)

    def strings(self) -> list[str]:
        if self._decoded is None:
            start, ends = self._start, self._ends
            blob = self._reader.data[start:ends[-1] if ends else start].tobytes()
            begin, out = 8, []
            for end in ends:
                out.append(blob[begin:end - start].decode("utf-8"))
                begin = end - start + 8
            self._decoded = out
        return self._decoded


class _StringArrayField(ReaderField):
    """A ReaderField whose contents() reads the decoded strings (_StringParts)."""
    __slots__ = ()

    def contents(self, index_or_slice: int | slice = slice(None)) -> Any:
        return self.parts.strings()[index_or_slice]  # (a slice: a new list, the caller's own)


class _Corrupt(ValueError):
    pass


def open_gguf(path: Path) -> GGUFReader:
    """Parse a GGUF file's header (metadata and tensor table); tensor data stays memory-mapped."""
    path = Path(path)
    if not exists(path):
        raise ModelLoadError(f"no GGUF file at {path}")
    regular_file(path)  # a FIFO or device is refused by its kind, unopened
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise cannot_read(path, exc) from exc
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path.name} is not a GGUF file (it does not start with 'GGUF')")
    try:
        return _Reader(path)
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path.name} is truncated or corrupt: {exc}") from exc
    except OSError as exc:
        raise cannot_read(path, exc) from exc


def _field(reader: GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    try:
        return field.contents()
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"GGUF metadata {key} cannot be read: {exc}") from exc


def _source(reader: GGUFReader) -> str:
    path = getattr(reader, "path", None)
    return path.name if path is not None else "GGUF metadata"


def architecture(reader: GGUFReader) -> str:
    arch = _field(reader, "general.architecture")
    if arch is not None and not isinstance(arch, str):
        raise ModelLoadError(f"{_source(reader)}: general.architecture is {show(arch)}, expected a "
                             "string such as 'llama'")
    if not isinstance(arch, str):
        raise ModelLoadError("GGUF metadata has no general.architecture")
    if arch not in ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise ModelLoadError(f"GGUF architecture {arch!r} is not supported (supported: {known})")
    return arch


# config.json field -> GGUF key after "<arch>.": gguf_config reads each field from its key (rope_scaling
# from rope.scaling.type), and a message about the field names the key
_GGUF_KEYS = {
    "hidden_size": "embedding_length", "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv", "num_hidden_layers": "block_count",
    "intermediate_size": "feed_forward_length", "max_position_embeddings": "context_length",
    "rms_norm_eps": "attention.layer_norm_rms_epsilon", "rope_theta": "rope.freq_base",
    "head_dim": "attention.key_length", "rope_scaling": "rope.scaling",
    "sliding_window": "attention.sliding_window",
}


def gguf_config(reader: GGUFReader) -> ModelConfig:
    """GGUF metadata -> the engine's config, through the same checks as a config.json."""
    arch = architecture(reader)

    def meta(key, default=None):
        value = _field(reader, f"{arch}.{key}", default)
        return value.item() if isinstance(value, np.generic) else value  # NumPy scalar -> Python

    n_head = meta(_GGUF_KEYS["num_attention_heads"])
    n_vocab = meta("vocab_size")
    vocab_key = f"{arch}.vocab_size"
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if n_vocab is None and tokens is not None:
        n_vocab, vocab_key = len(tokens.data), "the length of tokenizer.ggml.tokens"
    if n_vocab is None:  # the embedding table says it
        emb = _tensor_table(reader).get("token_embd.weight")
        n_vocab = int(emb.shape[-1]) if emb is not None else None
        vocab_key = "the rows of token_embd.weight"
    # what a key the file leaves out stands for
    defaults = {"num_key_value_heads": n_head, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
    raw = {"model_type": ARCHITECTURES[arch], "vocab_size": n_vocab, "hidden_act": "silu",
           **{hf: meta(key, defaults.get(hf)) for hf, key in _GGUF_KEYS.items() if hf != "rope_scaling"}}
    # the GGUF key each config field came from, so a message names what the file holds
    names = {"model_type": "general.architecture", "vocab_size": vocab_key,
             **{hf: f"{arch}.{key}" for hf, key in _GGUF_KEYS.items()}}
    # no output.weight: the output head reuses the token embedding (the calculator counts it once)
    raw["tie_word_embeddings"] = "output.weight" not in _tensor_table(reader)
    eos = _field(reader, "tokenizer.ggml.eos_token_id")  # where generation stops
    raw["eos_token_id"] = int(eos) if isinstance(eos, (int, np.integer)) else None
    scaling = meta(f"{_GGUF_KEYS['rope_scaling']}.type")
    if scaling not in (None, "none"):
        raw["rope_scaling"] = {"type": scaling, "factor": meta(f"{_GGUF_KEYS['rope_scaling']}.factor")}
    if scaling == "yarn":
        _yarn_gguf(raw, names, meta, arch, _source(reader))
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):  # refused when set
        raw[key], names[key] = meta(key), f"{arch}.{key}"
    if arch == "gemma3":
        _gemma3_gguf(raw, names, meta, arch)
    elif raw["sliding_window"] is not None:  # 0: no window, as in a config.json (hf_config.sliding_window)
        raw["use_sliding_window"] = True
    source = _source(reader)
    raw = {k: v for k, v in raw.items() if v is not None}  # absent from the file: "is missing"
    cfg = config_from_dict(raw, source=source, names=names)
    factors = _tensor_table(reader).get("rope_freqs.weight")
    if factors is not None:  # Llama 3.1+: llama.cpp's converter stores the llama3 scaling per frequency
        divisors = GGUFTensors(reader, getattr(reader, "path", Path(source))).get(
            "rope_freqs.weight", (cfg.d_head // 2,))
        cfg = replace(cfg, rope=replace(cfg.rope, kind="factors",
                                        freq_divisors=tuple(float(x) for x in divisors)))
    rope_dims = meta("rope.dimension_count")
    if rope_dims is not None and not is_whole(rope_dims):
        raise ModelLoadError(f"{source}: {arch}.rope.dimension_count is {show(rope_dims)}, expected "
                             "a whole number (the head dimensions RoPE rotates)")
    if rope_dims is not None and int(rope_dims) != cfg.d_head:
        raise ModelLoadError(f"RoPE on {rope_dims} of {cfg.d_head} head dimensions (partial rotary) "
                             "is not supported yet")
    return cfg


def _yarn_gguf(raw: dict, names: dict, meta, arch: str, source: str) -> None:
    """YaRN's numbers as llama.cpp's converter writes them (rope.scaling.original_context_length,
    yarn_beta_fast/slow) into the config's rope_scaling, which transformers' YaRN then computes.
    llama.cpp's own extra knobs, where a file sets them to anything but their neutral value
    (ext_factor 1, attn_factor 1, log_multiplier 0), are refused by key: they change the rotation
    or its scale in ways the config has no field for."""
    scaling = _GGUF_KEYS["rope_scaling"]
    s, k = raw["rope_scaling"], f"{arch}.{scaling}."
    for gguf_key, field_name in (("original_context_length", "original_max_position_embeddings"),
                                 ("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
        if meta(f"{scaling}.{gguf_key}") is not None:
            s[field_name] = meta(f"{scaling}.{gguf_key}")
            names[f"rope_scaling.{field_name}"] = k + gguf_key
    for gguf_key, neutral in (("yarn_ext_factor", (1.0, -1.0)), ("yarn_attn_factor", (1.0,)),
                              ("yarn_log_multiplier", (0.0,))):
        value = meta(f"{scaling}.{gguf_key}")
        if value is not None and float(value) not in neutral:
            raise ModelLoadError(f"{source}: {k}{gguf_key} = {show(value)}: YaRN with llama.cpp's "
                                 f"{gguf_key.removeprefix('yarn_')} is not supported (only "
                                 f"{' or '.join(f'{n:g}' for n in neutral)})")


def _gemma3_gguf(raw: dict, names: dict, meta, arch: str) -> None:
    """What a Gemma 3 GGUF leaves to the reader, filled in as llama.cpp's LLM_ARCH_GEMMA3 does.

    - Which layers are local: GGUF files of Gemma 3 carry no layer pattern (llama.cpp's converter
      writes none), so llama.cpp applies the family's documented default, every 6th layer global
      (`set_swa_pattern(6)`, as sliding_window_pattern 6 in Gemma 3's config.json); a file that
      does carry `attention.sliding_window_pattern` (a number, or one flag per layer) is read. No
      window (absent or 0): every layer global.
    - Local layers' RoPE base: 10,000 (`rope_freq_base_train_swa`), unscaled.
    - The score scale: llama.cpp does not read query_pre_attn_scalar from the file; it uses
      d_model / n_head for the 62-layer 27B model and head_dim for the others, as Gemma's configs do.
    - The norm gains are stored as 1 + w already (its converter adds the 1)."""
    raw["hidden_activation"] = "gelu_pytorch_tanh"
    raw["rope_local_base_freq"] = 10_000.0
    raw.pop("hidden_act")
    n_layer, window = raw["num_hidden_layers"], raw["sliding_window"]
    pattern = meta("attention.sliding_window_pattern")
    names["layer_types"] = names["sliding_window_pattern"] = f"{arch}.attention.sliding_window_pattern"
    if not window:  # llama.cpp: no sliding window key, or 0 -> no SWA
        raw["sliding_window"] = None
        raw["layer_types"] = ["full_attention"] * n_layer if is_whole(n_layer) else None
    elif isinstance(pattern, list):
        raw["layer_types"] = ["sliding_attention" if on else "full_attention" for on in pattern]
    else:
        raw["sliding_window_pattern"] = 6 if pattern is None else pattern
    head_dim, d, n_head = raw["head_dim"], raw["hidden_size"], raw["num_attention_heads"]
    if n_layer == 62 and is_whole(d) and is_whole(n_head) and n_head:
        raw["query_pre_attn_scalar"] = d / n_head
    else:
        raw["query_pre_attn_scalar"] = head_dim


def _tensor_table(reader: GGUFReader) -> dict:
    return {t.name: t for t in reader.tensors}


class QuantRows:
    """A [rows, cols] table kept in its GGUF encoding; indexing dequantises just those rows."""

    def __init__(self, name: str, data: np.ndarray, qtype: GGMLQuantizationType, shape: tuple[int, int]):
        self.name, self._data, self._qtype, self.shape = name, data, qtype, shape
        self.dtype = np.dtype(np.float32)

    def __getitem__(self, rows) -> np.ndarray:
        src = np.asarray(self._data[rows]).reshape(-1, self._data.shape[-1])  # [n, row bytes]
        out = np.empty((src.shape[0], self.shape[1]), np.float32)
        # this module's dequantisers (gguf's values bit for bit); the whole table (an unembedding:
        # a layer's worth of weights) in row blocks on one thread per core, a text's rows on this one
        step = max(1, min(FILL_VALUES // max(1, self.shape[1]), -(-len(src) // cores())))
        if len(src) * self.shape[1] <= COLUMN_BLOCK_VALUES:
            step = max(1, len(src))
        starts = range(0, len(src), step)

        def block(k):
            a = starts[k]
            if not dequantize_into(src[a:a + step], self._qtype, out[a:a + step]):  # (F16)
                out[a:a + step] = np.asarray(dequantize(src[a:a + step], self._qtype),
                                             dtype=np.float32).reshape(-1, self.shape[1])
        prepare(self._qtype)
        in_threads(len(starts), block)
        out = out.reshape((*np.shape(rows), self.shape[1]) if not isinstance(rows, slice)
                          else (-1, self.shape[1]))
        # kept quantised, this table is not scanned at load (dequantising it all would be a large
        # share of the load): the rows a run uses are checked as they are dequantised
        if not np.isfinite(out).all():
            bad = np.flatnonzero(~np.isfinite(out.reshape(-1, self.shape[1])).all(axis=1))[0]
            row = np.arange(self.shape[0])[rows].reshape(-1)[bad]
            raise ModelLoadError(f"tensor {self.name} row {int(row)} (token id {int(row)}) holds "
                                 "non-finite values, expected finite numbers: the file is damaged")
        return out

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype=dtype)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)


class GGUFTensors:
    """The tensors of a GGUF file by name, dequantised to float32 on request."""

    def __init__(self, reader: GGUFReader, path: Path):
        self.path = path
        self._table = _tensor_table(reader)

    def __contains__(self, name: str) -> bool:
        return name in self._table

    def shape(self, name: str) -> tuple[int, ...]:  # NumPy order: [rows, cols] = [out, in]
        return tuple(int(n) for n in reversed(self._table[name].shape.tolist()))

    def check(self, name: str, shape: tuple[int, ...]):
        """Tensor `name`'s table entry, refused unless present, of `shape` and a float type."""
        t = self._table.get(name)
        if t is None:
            raise ModelLoadError(f"{self.path.name} has no tensor {name!r}")
        check_shape(name, self.shape(name), shape, "the GGUF metadata")
        if t.tensor_type in _INTEGER_TYPES:
            raise ModelLoadError(f"tensor {name} is stored as {t.tensor_type.name}, not a float type")
        return t

    def stored(self, name: str, shape: tuple[int, ...]):
        """Tensor `name`'s entry as get, fill and rows read it (type, data), checked as check()
        checks it. (A quantized copy of the file gives its tensors at another type here:
        engine/computing/quantized.py.)"""
        return self.check(name, shape)

    def get(self, name: str, shape: tuple[int, ...], check: bool = True) -> np.ndarray:
        """Float32 tensor `name` [out, in], checked against the shape the metadata implies (and,
        `check`, its values finite)."""
        t = self.stored(name, shape)
        try:
            out = dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise ModelLoadError(f"tensor {name} is stored as {t.tensor_type.name}, which the gguf "
                                 "package cannot dequantise") from None
        except ValueError as exc:
            raise ModelLoadError(f"tensor {name} ({t.tensor_type.name}) cannot be read: {exc}") from exc
        out = np.asarray(out, dtype=np.float32).reshape(shape)
        if check:
            check_finite(out, name, self.path.name)
        return out

    def fill(self, name: str, shape: tuple[int, int], out: np.ndarray, rows: np.ndarray | None = None,
             check: bool = True, columns: bool = False) -> np.ndarray:
        """Tensor `name` [out, in] (checked against `shape`) dequantised into `out` [out, in], a
        C-contiguous float32 array, in row blocks of at most FILL_VALUES values (the transient arrays
        stay small whatever the tensor's size) shared out to one thread per core (NumPy's passes
        release the GIL; benchmarks/dequant.py measures it). `rows`: out[r] =
        tensor[rows[r]] (a permutation). `columns`: `out` is [in, out] instead (C order, or columns
        of such an array): each row block is dequantised into a scratch block in cache and copied
        into its columns. Values as get() gives them, bit for bit (each value is dequantised from
        its own block alone; the blocks' split changes no value)."""
        t = self.stored(name, shape)
        data = np.asarray(t.data).reshape(shape[0], -1)  # [out, row bytes] (or [out, in] F32/F16)
        step = max(1, min(FILL_VALUES // max(1, shape[1]), -(-shape[0] // cores())))
        if columns:  # a scratch block of rows that stays in cache
            step = min(step, max(1, COLUMN_BLOCK_VALUES // max(1, shape[1])))
        starts = range(0, shape[0], step)
        finite = [True] * len(starts)
        scratch = threading.local()

        def block(k):  # rows a..a+step-1, on whichever thread takes it
            a = starts[k]
            src = data[a:a + step] if rows is None else data[rows[a:a + step]]
            if columns:
                dst = getattr(scratch, "rows", None)
                if dst is None:
                    dst = scratch.rows = np.empty((step, shape[1]), np.float32)
                dst = dst[:len(src)]
            else:
                dst = out[a:a + step]
            if not dequantize_into(src, t.tensor_type, dst):  # (F32, F16)
                dst[...] = dequantize(src, t.tensor_type).reshape(-1, shape[1])
            if check:
                finite[k] = bool(np.isfinite(dst).all())
            if columns:
                np.copyto(out[:, a:a + len(src)], dst.T)
        try:
            prepare(t.tensor_type)  # (gguf's lookup grids made once, before the threads)
            in_threads(len(starts), block)
        except NotImplementedError:
            raise ModelLoadError(f"tensor {name} is stored as {t.tensor_type.name}, which the gguf "
                                 "package cannot dequantise") from None
        except ValueError as exc:
            raise ModelLoadError(f"tensor {name} ({t.tensor_type.name}) cannot be read: {exc}") from exc
        if check and not all(finite):  # named as the file stores it: count, first position
            rows_out = out.T if columns else out
            check_finite(rows_out if rows is None else rows_out[np.argsort(rows)], name, self.path.name)
        return out

    def nbytes32(self, name: str) -> int:
        """Bytes of tensor `name` as float32 (0 when the file has none)."""
        t = self._table.get(name)
        return 0 if t is None else 4 * int(t.n_elements)

    def rows(self, name: str, shape: tuple[int, int]):
        """A [rows, cols] table kept quantised (F32 stays a memory-mapped view)."""
        t = self.stored(name, shape)
        if t.tensor_type == GGMLQuantizationType.F32:
            table = np.asarray(t.data).reshape(shape)
            check_finite(table, name, self.path.name)
            return table
        if t.tensor_type not in _DEQUANTISABLE:
            raise ModelLoadError(f"tensor {name} is stored as {t.tensor_type.name}, which the gguf "
                                 "package cannot dequantise")
        return QuantRows(name, np.asarray(t.data), t.tensor_type, shape)

    def float32_bytes(self, skip: tuple[str, ...] = ()) -> int:
        return sum(4 * int(t.n_elements) for n, t in self._table.items() if n not in skip)


FILL_VALUES = 1 << 22  # values dequantised at a time into a layer's arrays (16 MiB as float32)
COLUMN_BLOCK_VALUES = 1 << 16  # ... into a scratch block first, for an [in, out] matrix (256 KiB)


def _dequantisable() -> set:
    import gguf.quants as q
    return set(q._type_traits) | {GGMLQuantizationType.F32, GGMLQuantizationType.F16}


_DEQUANTISABLE = _dequantisable()
_INTEGER_TYPES = {GGMLQuantizationType.I8, GGMLQuantizationType.I16, GGMLQuantizationType.I32,
                  GGMLQuantizationType.I64}


def unpermute_qk(w: np.ndarray, n_head: int) -> np.ndarray:  # [n_head d_head, ...] -> same shape
    """Undo llama.cpp's `permute` of Q/K rows (its RoPE rotates adjacent pairs): back to the
    Hugging Face rotate-half layout. Within each head, llama.cpp stored rows (0, h, 1, h+1, ...)."""
    d_head = w.shape[0] // n_head
    return (w.reshape(n_head, d_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape))


def unpermuted_rows(n_rows: int, n_head: int) -> np.ndarray:  # [n_rows] int64
    """The file row each row of unpermute_qk's result comes from: unpermute_qk(w) == w[rows]."""
    return unpermute_qk(np.arange(n_rows).reshape(n_rows, 1), n_head).reshape(-1)


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


def _matrix(fills, ts: GGUFTensors, check: bool):  # -> [in, out] float32 (None: no fills)
    """A layer matrix as the engine multiplies by it, [in, out], from the file's [out, in] rows,
    laid out by layout.kept_in_c_order: C order (written as columns), else the transposed view of
    the rows as read (Fortran order). Written in the load's arena."""
    if fills is None:
        return None
    n_out, n_in = sum(f.shape[0] for f in fills), fills[0].shape[1]
    columns = kept_in_c_order(n_in, n_out)
    out = float32_array((n_in, n_out) if columns else (n_out, n_in))
    for f in fills:
        part = out[:, f.at:f.at + f.shape[0]] if columns else out[f.at:f.at + f.shape[0]]
        ts.fill(f.name, f.shape, part, f.rows, check, columns=columns)
    return out if columns else out.T


def _output(plan: _LayerPlan, ts: GGUFTensors, check: bool):
    """A layer's w_o [n_head d_head, d_model], b_o [d_model] and post_attn_norm (Gemma 3's (gain,))
    alone, or None where it has none, as _expand reads them: what DLA and the value norms need, a
    tenth of a layer."""
    b_o, post = plan.small.get("b_o"), plan.small.get("post_attn_norm")
    return (_matrix(plan.o, ts, check), None if b_o is None else ts.get(*b_o, check),
            None if post is None else (ts.get(*post, check),))


def _expand(plan: _LayerPlan, ts: GGUFTensors, cfg: ModelConfig, permuted: bool, check: bool) -> Layer:
    """A layer's float32 arrays from the file, as its plan says."""
    def matrix(fills):
        return _matrix(fills, ts, check)

    vec = {k: ts.get(name, shape, check) for k, (name, shape) in plan.small.items()}
    biases = [vec.get("b_q"), vec.get("b_k"), vec.get("b_v")]
    if permuted and biases[0] is not None:
        biases[0], biases[1] = (unpermute_qk(biases[0], cfg.n_head),
                                unpermute_qk(biases[1], cfg.n_kv_head))
    w_in, w_out = matrix(plan.gate_up), matrix(plan.down)
    norm = lambda key: (vec[key],) if key in vec else None  # noqa: E731
    return Layer(
        w_qkv=matrix(plan.qkv), b_qkv=cat_bias(biases), w_o=matrix(plan.o), b_o=vec.get("b_o"),
        norm1=norm("norm1"), norm2=norm("norm2"), w_in=w_in, b_in=None, w_out=w_out, b_out=None,
        q_norm=vec.get("q_norm"), k_norm=vec.get("k_norm"),
        post_attn_norm=norm("post_attn_norm"), post_mlp_norm=norm("post_mlp_norm"))


def load_llama_gguf(cfg: ModelConfig, arch: str, ts: GGUFTensors, budget: int | None = None,
                    name: str | None = None, eager: bool = True) -> Weights:
    """GGUF tensors (llama.cpp names) -> the engine's Llama-family layout (Gemma 3 too: its four
    norms per layer). The layers stay in the file's type and are expanded to float32 within the
    memory budget (engine/reading/budget.py): `budget` bytes, else the one chosen, else the default.
    `eager`: expand (and check) the layers the budget keeps now; otherwise each layer is expanded
    and checked when a run first reaches it (a one-shot command that needs a few layers)."""
    d = cfg.d_model
    permuted = arch in PERMUTED_QK
    plans = [_layer_plan(cfg, arch, ts, i) for i in range(cfg.n_layer)]
    sizes = [sum(ts.nbytes32(f.name) for part in (p.qkv, p.o, p.gate_up or (), p.down or ())
                 for f in part) + sum(ts.nbytes32(n) for n, _ in p.small.values()) for p in plans]
    budget = resolve_budget(name or ts.path.name, sizes, float32_bytes_needed(cfg, ts) - sum(sizes),
                            budget)
    layers = LayerStore(lambda i, check: _expand(plans[i], ts, cfg, permuted, check), sizes, budget,
                        ts.path.name, output=lambda i, check: _output(plans[i], ts, check))
    if eager:  # a model that fits: every layer read and checked at load
        layers.expand_kept()
    tok_emb = ts.rows("token_embd.weight", (cfg.vocab_size, d))
    # the output head: kept quantised like the embedding (prediction dequantises it once, lazily);
    # no output.weight means it is tied to the token embedding
    out = ("output.weight", lambda: ts.rows("output.weight", (cfg.vocab_size, d)))
    head = read_head(lambda n: ts.get(n, (d,)), ("output_norm.weight",),
                     out if "output.weight" in ts else ("(tied to token_embd.weight)", lambda: tok_emb),
                     ts.path.name)
    if plans[-1].gate_up is None and head.missing is None:
        head = Head(head.norm, head.unembed, f"{ts.path.name}: no tensor "
                    f"'blk.{cfg.n_layer - 1}.ffn_up.weight' (the last layer's MLP) for prediction")
    return Weights(tok_emb=tok_emb, pos_emb=None, type_emb=None, emb_norm=None, layers=layers,
                   head=head)


def float32_bytes_needed(cfg: ModelConfig, ts: GGUFTensors) -> int:
    """What the model's tensors take as float32, but the embedding and the output head, kept
    quantised (prediction dequantises the output head when first asked), and the RoPE frequency
    table."""
    return ts.float32_bytes(("token_embd.weight", "output.weight", "rope_freqs.weight"))


def gguf_tokenizer(reader: GGUFReader, n_rows: int | None = None
                   ) -> tuple[TextTokenizer | None, str | None]:
    """The tokenizer that tokenizer.ggml.* describes (byte-level BPE or SentencePiece, gguf_vocab),
    or (None, a one-line notice) when attnviz cannot build it (the model then takes typed token
    ids). Its arrays are checked (types, one entry per token) and, given the embedding's `n_rows`,
    every id must pick a row of it."""
    source = _source(reader)

    def typed(key, check, expected, default=None):
        value = _field(reader, key, default)
        if value is not None and not check(value):
            raise ModelLoadError(f"{source}: {key} is {show(value)}, expected {expected}")
        return value

    def list_of(*kinds):  # set(map(type)): a C loop, no Python per token
        return lambda value: isinstance(value, list) and set(map(type, value)) <= set(kinds)

    def flag(key, default):
        return bool(typed(key, lambda v: isinstance(v, (bool, np.bool_)), "true or false", default))

    def token_id(key):
        value = typed(key, is_whole, "a token id (a whole number)")
        if value is not None and not 0 <= value < len(tokens):
            raise ModelLoadError(f"{source}: {key} is {value:,}, expected a token id in "
                                 f"0..{len(tokens) - 1:,}")
        return None if value is None else int(value)

    kind = typed("tokenizer.ggml.model", lambda v: isinstance(v, str), "a string such as 'gpt2'")
    pre = typed("tokenizer.ggml.pre", lambda v: isinstance(v, str), "a string such as 'llama-bpe'",
                "gpt2")
    if kind not in ("gpt2", "llama"):
        return None, (f"this GGUF's tokenizer ({kind or 'none'}) is not supported yet (byte-level BPE "
                      "and SentencePiece only): type token ids instead, e.g. 5, 17, 3")
    if kind == "gpt2" and pre not in vocab.PRE_SPLITS:
        return None, (f"this GGUF's pre-tokenizer {pre!r} is not supported yet (supported: "
                      f"{', '.join(vocab.SUPPORTED_PRE)}): type token ids instead, e.g. 5, 17, 3")
    tokens = typed("tokenizer.ggml.tokens", list_of(str), "a list of token strings")
    if not tokens:
        return None, "this GGUF has no vocabulary (tokenizer.ggml.tokens): type token ids instead"
    types = typed("tokenizer.ggml.token_type",
                  list_of(int),
                  "a list of whole numbers, one per token") or [vocab.NORMAL] * len(tokens)
    scores = typed("tokenizer.ggml.scores", list_of(float, int), "a list of numbers")
    for key, values in (("tokenizer.ggml.token_type", types), ("tokenizer.ggml.scores", scores)):
        if values is not None and len(values) != len(tokens):
            raise ModelLoadError(f"{source}: {key} has {len(values):,} entries, expected one per "
                                 f"token of tokenizer.ggml.tokens ({len(tokens):,})")
    if n_rows is not None and len(tokens) > n_rows:
        raise ModelLoadError(
            f"{source}: tokenizer.ggml.tokens has {len(tokens):,} tokens, but the embedding "
            f"token_embd.weight has {n_rows:,} rows: expected ids 0..{n_rows - 1:,}")
    # llama.cpp's defaults where the file says nothing: a SentencePiece vocabulary adds BOS and
    # prefixes a space, a byte-level one does neither
    spm = kind == "llama"
    add_bos = flag("tokenizer.ggml.add_bos_token", spm)
    add_eos = flag("tokenizer.ggml.add_eos_token", False)
    bos, eos = token_id("tokenizer.ggml.bos_token_id"), token_id("tokenizer.ggml.eos_token_id")
    if spm:
        if scores is None:
            raise ModelLoadError(f"{source}: tokenizer.ggml.scores is missing, expected one score "
                                 "per token (SentencePiece merges by them)")
        unk = token_id("tokenizer.ggml.unknown_token_id")
        tok = vocab.sentencepiece_bpe(tokens, scores, types,
                                      flag("tokenizer.ggml.add_space_prefix", True), unk)
        vocab.add_file_tokens(tok, tokens, types, (vocab.CONTROL, vocab.UNKNOWN))
    else:
        merges = typed("tokenizer.ggml.merges", list_of(str), "a list of 'left right' strings") or []
        try:
            tok = vocab.byte_level_bpe(tokens, merges, pre)
        except Exception as exc:  # tokenizers raises a bare Exception (a merge of unknown tokens)
            raise ModelLoadError(f"{source}: tokenizer.ggml.merges cannot be used with "
                                 f"tokenizer.ggml.tokens: {exc}") from exc
        # control tokens (<|im_start|>, <|endoftext|>) match as whole tokens in typed text, as in
        # llama.cpp with parse_special; user-defined tokens too, without counting as special
        vocab.add_file_tokens(tok, tokens, types, (vocab.CONTROL,))
    vocab.add_bos_eos(tok, tokens, bos if add_bos else None, eos if add_eos else None,
                      fallback=None if spm else processors.ByteLevel(trim_offsets=False))
    return TextTokenizer(tok), None


def read_gguf(path: Path, name: str | None = None, license: str | None = None,
              budget: int | None = None, eager: bool = True) -> ReadModel:
    """Read a GGUF model file: config from its metadata, tokenizer built, layers expanded to float32
    within the memory budget (`budget` bytes, else the one chosen, else the default); `eager=False`
    leaves each layer in the file until a run first needs it."""
    path = Path(path).expanduser()
    reader = open_gguf(path)
    arch = architecture(reader)
    cfg = gguf_config(reader)
    tokenizer, notice = gguf_tokenizer(reader, n_rows=cfg.vocab_size)  # checked before the weights
    if notice:
        log.info("%s: %s", path.name, notice)
    ts = GGUFTensors(reader, path)
    weights = load_llama_gguf(cfg, arch, ts, budget, name or path.name, eager)
    file_license = _field(reader, "general.license")
    return ReadModel(name or gguf_display_name(reader, path), path, cfg, weights, tokenizer,
                     license=license or (file_license if isinstance(file_license, str) else None),
                     notice=notice)


def gguf_display_name(reader: GGUFReader, path: Path) -> str:
    """The file's name without .gguf (its general.name is often a training run's tag)."""
    return path.name[:-5] if path.name.lower().endswith(".gguf") else path.name
