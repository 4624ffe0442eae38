"""GGUF files' headers (llama.cpp, LM Studio, Ollama): the file opened with bounds checks, its
metadata read into a `ModelConfig`.

The `gguf` package (maintained in the llama.cpp repository) parses the file; this module checks
what it reads (a truncated file or an absurd length is one clear error) and maps the metadata keys
to config.json's fields. The tensors are read by gguf_tensors.py, the model by gguf_model.py.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.config import ModelConfig, config_from_dict
from attnviz.engine.reading.gguf_tensors import REDO, GGUFTensors, tensor_table
from attnviz.engine.reading.mapped_files import MappedFile
from attnviz.engine.reading.validate import (
    block_numbers, cannot_read, check_vocab_rows, exists, file_kind, is_whole, layers_beyond, layers_held,
    refusal, regular_file, show, too_few_layers,
)

GGUF_MAGIC = b"GGUF"
# general.architecture -> the model_type whose forward pass serves it
ARCHITECTURES = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3",
                 "phi3": "phi3", "gemma3": "gemma3_text"}
# llama.cpp's converter permutes Q/K rows for its interleaved RoPE in these architectures only
# (Qwen2, Qwen3, Phi-3 and Gemma 3 use NeoX-style RoPE, which is already rotate-half).
PERMUTED_QK = {"llama", "mistral"}


def gguf_in_folder(folder: Path) -> Path:
    """A folder without config.json that holds one GGUF file (LM Studio's folders, a download's):
    that file; a folder of several names them; any other folder is itself."""
    if (folder / "config.json").exists():
        return folder
    try:
        ggufs = sorted(p for p in folder.iterdir() if p.suffix.lower() == ".gguf" and p.is_file())
    except OSError:
        return folder
    if len(ggufs) == 1:
        return ggufs[0]
    if ggufs:
        names = ", ".join(p.name for p in ggufs[:6]) + (", …" if len(ggufs) > 6 else "")
        raise ModelLoadError(f"{folder} is not a model folder (it has no config.json) and holds "
                             f"{len(ggufs)} GGUF files: open one of them ({names})")
    return folder


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
        self.mapped = MappedFile(path)  # held open: each run checks it is as it was (mapped_files.py)
        super().__init__(self.mapped.open_file(), *args, **kwargs)

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
        self._strings = _StringParts(data, self.byte_order, orig_offs + 12, ends)
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
    every string once (UTF-8, strict, as gguf's contents()) from one copy of the array's bytes.

    It holds the file's bytes (`data`, the reader's view) and their byte order, not the reader:
    the reader holds its fields, so a reference back would make a cycle, and a reader let go
    would stay (its view of the whole file with it) until the cyclic collector ran, or for good
    where the window froze it first (ui/machinery/tuning.py freeze_start_up_objects)."""

    def __init__(self, data: np.ndarray, byte_order: str, start: int, ends: list[int],
                 head: tuple = ()):
        self._data, self._order, self._start, self._ends, self._head = data, byte_order, start, ends, head
        self._length = np.dtype(np.uint64).newbyteorder(byte_order)  # a string's length, as _get reads it
        self._decoded: list[str] | None = None

    def after(self, head) -> _StringParts:  # the same strings behind the field's own parts
        return _StringParts(self._data, self._order, self._start, self._ends, tuple(head))

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
            return self._data[begin + 8:self._ends[k]]
        return self._data[begin:begin + 8].view(self._length)

    def strings(self) -> list[str]:
        if self._decoded is None:
            start, ends = self._start, self._ends
            blob = self._data[start:ends[-1] if ends else start].tobytes()
            begin, out = 8, []
            for end in ends:
                out.append(blob[begin:end - start].decode("utf-8"))
                begin = end - start + 8
            self._decoded = out
        return self._decoded


def string_bytes(reader: GGUFReader, key: str) -> tuple[bytes, np.ndarray, np.ndarray] | None:
    """A metadata string array's bytes as the file holds them (each string after its 8-byte
    length) and where each string's UTF-8 starts and ends in them ([n] int64 each), without
    decoding any; None where `key` is no string array this reader parsed in one pass (_Reader's)."""
    field = reader.fields.get(key)
    parts = getattr(field, "parts", None)
    if not isinstance(field, _StringArrayField) or not isinstance(parts, _StringParts):
        return None
    start, ends = parts._start, parts._ends
    blob = parts._data[start:ends[-1] if ends else start].tobytes()
    stops = np.array(ends, np.int64) - start
    begins = np.empty_like(stops)
    begins[:1] = 8
    begins[1:] = stops[:-1] + 8
    return blob, begins, stops


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
    if not magic:
        raise ModelLoadError(f"{path.name} is empty (0 bytes), not a GGUF model; download or convert it again")
    if magic != GGUF_MAGIC:
        raise ModelLoadError(f"{path.name} is not a GGUF file (it does not start with 'GGUF')")
    try:
        return _Reader(path)
    except (ValueError, KeyError, IndexError, OverflowError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{path.name} is truncated or corrupt: {exc}") from exc
    except OSError as exc:
        raise cannot_read(path, exc) from exc


def metadata(reader: GGUFReader, key: str, default: Any = None) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return default
    try:
        return field.contents()
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise ModelLoadError(f"{source_name(reader)}: GGUF metadata {key} cannot be read ({exc})") from exc


def source_name(reader: GGUFReader) -> str:
    path = getattr(reader, "path", None)
    return path.name if path is not None else "GGUF metadata"


def architecture(reader: GGUFReader) -> str:
    arch = metadata(reader, "general.architecture")
    if arch is not None and not isinstance(arch, str):
        raise refusal(source_name(reader), "general.architecture", show(arch), "a string such as 'llama'")
    if not isinstance(arch, str):
        raise refusal(source_name(reader), "general.architecture", None, "the model's architecture, "
                      "such as 'llama'")
    if arch not in ARCHITECTURES:
        known = ", ".join(sorted(ARCHITECTURES))
        raise ModelLoadError(f"{source_name(reader)} holds a {arch!r} model (general.architecture), which "
                             f"attnviz cannot open yet (it opens {known})")
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
        value = metadata(reader, f"{arch}.{key}", default)
        return value.item() if isinstance(value, np.generic) else value  # NumPy scalar -> Python

    n_head = meta(_GGUF_KEYS["num_attention_heads"])
    n_vocab = meta("vocab_size")
    vocab_key = f"{arch}.vocab_size"
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if n_vocab is None and tokens is not None:
        n_vocab, vocab_key = len(tokens.data), "the length of tokenizer.ggml.tokens"
    if n_vocab is None:  # the embedding table says it
        emb = tensor_table(reader).get("token_embd.weight")
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
    raw["tie_word_embeddings"] = "output.weight" not in tensor_table(reader)
    eos = metadata(reader, "tokenizer.ggml.eos_token_id")  # where generation stops
    raw["eos_token_id"] = int(eos) if isinstance(eos, (int, np.integer)) else None
    scaling = meta(f"{_GGUF_KEYS['rope_scaling']}.type")
    if scaling not in (None, "none"):
        raw["rope_scaling"] = {"type": scaling, "factor": meta(f"{_GGUF_KEYS['rope_scaling']}.factor")}
    if scaling == "yarn":
        _yarn_gguf(raw, names, meta, arch, source_name(reader))
    for key in ("attn_logit_softcapping", "final_logit_softcapping"):  # refused when set
        raw[key], names[key] = meta(key), f"{arch}.{key}"
    if arch == "gemma3":
        _gemma3_gguf(raw, names, meta, arch)
    elif raw["sliding_window"] is not None:  # 0: no window, as in a config.json (hf_config.sliding_window)
        raw["use_sliding_window"] = True
        raw["max_window_layers"] = 0  # a GGUF names no first windowed layer (Qwen's): every layer
    source = source_name(reader)
    raw = {k: v for k, v in raw.items() if v is not None}  # absent from the file: "is missing"
    cfg = config_from_dict(raw, source=source, names=names)
    factors = tensor_table(reader).get("rope_freqs.weight")
    if factors is not None:  # Llama 3.1+: llama.cpp's converter stores the llama3 scaling per frequency
        divisors = GGUFTensors(reader, getattr(reader, "path", Path(source))).get(
            "rope_freqs.weight", (cfg.d_head // 2,))
        cfg = replace(cfg, rope=replace(cfg.rope, kind="factors",
                                        freq_divisors=tuple(float(x) for x in divisors)))
    rope_dims = meta("rope.dimension_count")
    if rope_dims is not None and not is_whole(rope_dims):
        raise refusal(source, f"{arch}.rope.dimension_count", show(rope_dims),
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
            raise ModelLoadError(f"{source} sets {k}{gguf_key} to {show(value)}, but YaRN with "
                                 f"llama.cpp's {gguf_key.removeprefix('yarn_')} is not supported "
                                 f"(expected {' or '.join(f'{n:g}' for n in neutral)})")


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


def gguf_display_name(reader: GGUFReader, path: Path) -> str:
    """The file's name without .gguf (its general.name is often a training run's tag)."""
    return path.name[:-5] if path.name.lower().endswith(".gguf") else path.name


def check_counts(reader: GGUFReader, arch: str, cfg: ModelConfig, ts: GGUFTensors) -> str | None:
    """The metadata's layer count and vocabulary against the tensors the file holds: a file cut
    short, or written with another model's metadata, is refused by name, not by its first missing
    tensor. Returns the notice where the file holds more layers than block_count (read as many)."""
    source = ts.path.name
    claim = f"{source} sets {arch}.block_count to {cfg.n_layer:,}"
    held = block_numbers(ts.names())
    first = layers_held(held, cfg.n_layer)
    if first is not None:
        raise too_few_layers(claim, first, "it",
                             "the file is incomplete or was written wrong; download or convert it again")
    if "token_embd.weight" in ts and len(ts.shape("token_embd.weight")) == 2:
        if metadata(reader, f"{arch}.vocab_size") is not None:
            says = f"{source} sets {arch}.vocab_size to {cfg.vocab_size:,}"
        else:
            says = f"{source} has {cfg.vocab_size:,} tokens in tokenizer.ggml.tokens"
        check_vocab_rows(ts.shape("token_embd.weight")[0], cfg.vocab_size, says,
                         "its token embedding token_embd.weight", REDO)
    return layers_beyond(held, cfg.n_layer, claim, "it")
