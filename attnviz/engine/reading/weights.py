"""Reading safetensors checkpoints into float32 NumPy arrays, memory-mapped.

The `safetensors` library validates each file (header, byte coverage) and lists its tensors; the bytes
are then viewed through one `np.memmap` per file, because safetensors' NumPy backend has no bfloat16.
Pickle checkpoints (.bin/.pt/.pth) are refused: unpickling can run arbitrary code. Which one a file
is (torch.save's zip, a bare pickle, or neither) is told from its first bytes, never by unpickling.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from safetensors import SafetensorError, safe_open

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.mapped_files import MappedFile
from attnviz.engine.reading.validate import (
    cannot_read, check_finite, check_shape, exists, json_kind, read_json_object, refusal, regular_file,
    show,
)

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}

CONVERT_HINT = (
    "attnviz never unpickles model files (loading a pickle can run arbitrary code). "
    "Convert it once to safetensors, in an environment where you trust the file, e.g.: "
    "python -c \"from transformers import AutoModel; "
    "m = AutoModel.from_pretrained('FOLDER'); m.save_pretrained('FOLDER', safe_serialization=True)\" "
    "(or use the 'convert' Space of safetensors), then open the folder again"
)


def available_memory() -> int | None:
    """Bytes of memory the OS can still give this process (Linux MemAvailable), or None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format since PyTorch 1.6: a zip holding the pickle
PICKLE_PROTO = 0x80  # a pickle of protocol 2 or later starts with its PROTO opcode, then the protocol
HEAD_BYTES = 9  # what refuse_pickle reads: a safetensors header's 8-byte length and its '{'


def refuse_pickle(path: Path) -> ModelLoadError:
    """The error for a file named like a pickle checkpoint (.bin, .pt, ...): the conversion advice
    where its first bytes are torch.save's zip or a pickle's protocol opcode, a hint where they are
    a safetensors header, else that it is not a model file at all. Only those bytes are read, from
    a regular file only (a FIFO would block); a file that cannot be read says why."""
    try:
        with open(regular_file(path), "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError as exc:
        return cannot_read(path, exc)
    except ModelLoadError as exc:  # (not a regular file: its kind)
        return exc
    if head.startswith(ZIP_MAGIC) or (len(head) > 1 and head[0] == PICKLE_PROTO and 2 <= head[1] <= 5):
        return ModelLoadError(f"{path.name} is a PyTorch pickle checkpoint. {CONVERT_HINT}")
    if len(head) == HEAD_BYTES and head[8:] == b"{":
        return ModelLoadError(
            f"{path.name} looks like safetensors weights under another name: attnviz opens a model "
            "folder holding config.json and its weights named .safetensors")
    return ModelLoadError(
        f"{path.name} is not a model file attnviz can read: it is not a PyTorch checkpoint (neither "
        "torch.save's zip nor a pickle), a GGUF file or safetensors. attnviz opens a GGUF file "
        "(.gguf) or a model folder holding config.json and .safetensors weights")


def bf16_to_f32(u16: np.ndarray) -> np.ndarray:  # raw bfloat16 bits (uint16) -> float32
    return (u16.astype(np.uint32) << 16).view(np.float32)


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a checkpoint folder (single or sharded); refuses pickle-only folders.
    Each is checked to be a regular file before anything opens it (a FIFO would block the load)."""
    index = folder / "model.safetensors.index.json"
    if exists(index):
        return [regular_file(f) for f in shard_files(index)]
    single = folder / "model.safetensors"
    if exists(single):
        return [regular_file(single)]
    others = sorted(folder.glob("*.safetensors"))
    if others:
        return [regular_file(f) for f in others]
    pickles = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise refuse_pickle(pickles[0])
    raise ModelLoadError(f"{folder} has no model.safetensors")


_MISSING = object()


def shard_files(index: Path) -> list[Path]:
    """The shard files a model.safetensors.index.json names, its weight_map checked: an object of
    tensor name -> file name in the same folder."""
    weight_map = read_json_object(index).get("weight_map", _MISSING)
    if weight_map is _MISSING:
        raise refusal(index, "weight_map", None, "an object of tensor name -> shard file name")
    if not isinstance(weight_map, dict):
        raise refusal(index, "weight_map", json_kind(weight_map), "an object of tensor name -> shard file name")
    if not weight_map:
        raise refusal(index, "weight_map", "an empty object", "an object of tensor name -> shard file name")
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or shard in (".", "..") or any(
                sep in shard for sep in ("/", "\\", "\0")):
            raise refusal(index, f"weight_map[{show(tensor)}]", show(shard),
                          "the name of a shard file in the same folder")
    files = [index.parent / name for name in sorted(set(weight_map.values()))]
    missing = [f.name for f in files if not exists(f)]
    if missing:
        raise ModelLoadError(f"{index.name} names shards that are missing: {', '.join(missing)}")
    return files


class TensorFile:
    """One safetensors file: names, dtypes, shapes and float32 views of its tensors."""

    def __init__(self, path: Path):
        self.path = regular_file(path)
        try:  # read here first, so a file that cannot be opened says why (permission...)
            # held open: the header read and the map are of one file, checked before each run
            self.mapped = MappedFile(path)
            fh = self.mapped.open_file()
            head = fh.read(8)
            (n_header,) = struct.unpack("<Q", head) if len(head) == 8 else (None,)
            header_bytes = fh.read(n_header) if n_header is not None and n_header < 1 << 27 else b""
        except OSError as exc:
            raise cannot_read(path, exc) from exc
        if not head:
            raise ModelLoadError(f"{path.name} is empty (0 bytes), not safetensors weights; download "
                                 "them again")
        try:
            with safe_open(str(path), framework="numpy") as handle:  # validates the whole layout
                names = list(handle.keys())
            header = json.loads(header_bytes)
        except (SafetensorError, OSError, ValueError) as exc:
            raise ModelLoadError(f"{path.name} is truncated or is not a safetensors file ({exc})") from exc
        header.pop("__metadata__", None)
        self._data_start = 8 + n_header
        self._header = {k: header[k] for k in names}
        self._mmap = self.mapped.memmap()

    def names(self) -> list[str]:
        return list(self._header)

    def dtype(self, name: str) -> str:
        return self._header[name]["dtype"]

    def is_float(self, name: str) -> bool:
        return self.dtype(name) in FLOAT_DTYPES

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._header[name]["shape"])

    def raw(self, name: str) -> np.ndarray:
        """The tensor's stored values, a memory-mapped view (BF16 as its uint16 bits)."""
        info = self._header[name]
        dtype = FLOAT_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ModelLoadError(f"tensor {name} in {self.path.name} is stored as {info['dtype']}, but it "
                                 f"must be a float type ({', '.join(FLOAT_DTYPES)})")
        begin, end = info["data_offsets"]
        raw = self._mmap[self._data_start + begin:self._data_start + end].view(dtype)
        return raw.reshape(info["shape"])

    def get(self, name: str) -> np.ndarray:
        """The tensor as float32 (a zero-copy view for F32 files)."""
        info = self._header[name]
        raw = self.raw(name)
        dtype = FLOAT_DTYPES[info["dtype"]]
        if info["dtype"] == "BF16":
            return bf16_to_f32(raw)
        return raw if dtype is np.float32 else raw.astype(np.float32)


def mapped_files(ckpt) -> tuple:
    """The files a checkpoint's tensors map (Checkpoint, or a wrapper holding its `files`)."""
    return tuple(tf.mapped for tf in ckpt.files)


class RowTable:
    """A [rows, cols] F16 or BF16 table kept memory-mapped; indexing converts just those rows to
    float32 (exactly: both widen without rounding), so a row equals the converted table's."""

    def __init__(self, name: str, raw: np.ndarray, bf16: bool):
        self.name, self._raw, self._bf16 = name, raw, bf16
        self.shape, self.dtype = tuple(raw.shape), np.dtype(np.float32)

    def __getitem__(self, rows) -> np.ndarray:
        picked = self._raw[rows]
        return bf16_to_f32(picked) if self._bf16 else picked.astype(np.float32)

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self[:], dtype=dtype)

    @property
    def nbytes(self) -> int:
        return int(self._raw.nbytes)


SAVED_WITH = "give the config.json these weights were saved with"  # a shape config.json does not imply


def held_by(files: list[TensorFile]) -> str:
    """Where a message says a checkpoint's tensor is (or is not): its one file, or the folder of
    a sharded checkpoint, whose shards hold the tensors together."""
    if len(files) == 1:
        return files[0].path.name
    return f"the checkpoint in {files[0].path.parent.name}/"


class Checkpoint:
    """The tensors of a folder's safetensors files, by name. Buffers that are not floats (int64
    position_ids) are listed but never loaded: asking for one says its dtype. `config`: the
    config.json the shapes asked for come from (default: the folder's)."""

    def __init__(self, folder: Path, config: Path | None = None):
        self.config = str(config or Path(folder) / "config.json")
        self.files = [TensorFile(p) for p in weight_files(folder)]
        self._where: dict[str, TensorFile] = {}
        for tf in self.files:
            for name in tf.names():
                other = self._where.get(name)
                if other is not None:
                    raise ModelLoadError(f"tensor {name} is in both {other.path.name} and "
                                         f"{tf.path.name}, expected in one file")
                self._where[name] = tf

    def names(self) -> list[str]:
        """The float tensors' names."""
        return [n for n, tf in self._where.items() if tf.is_float(n)]

    def float32_bytes(self) -> int:
        """Bytes the float tensors take once converted to float32."""
        return sum(4 * int(np.prod(tf.shape(n), dtype=np.int64))
                   for n, tf in self._where.items() if tf.is_float(n))

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def missing(self, name: str) -> ModelLoadError:
        return ModelLoadError(f"{held_by(self.files)} has no tensor {name!r}")

    def shape(self, name: str) -> tuple[int, ...]:
        """Tensor `name`'s shape as stored (KeyError: no such tensor)."""
        return self._where[name].shape(name)

    def get(self, name: str, shape: tuple[int, ...], check: bool = True) -> np.ndarray:
        """Float32 tensor `name`, checked against the shape the config implies, its dtype (a float)
        and (`check`) its values (finite: a NaN or Inf would turn every pattern after it into NaN)."""
        tf = self._where.get(name)
        if tf is None:
            raise self.missing(name)
        check_shape(name, tf.shape(name), shape, self.config, tf.path.name, SAVED_WITH)
        arr = tf.get(name)
        if check:
            check_finite(arr, name, tf.path.name)
        return arr

    def rows(self, name: str, shape: tuple[int, int]):
        """A [rows, cols] table (an embedding, an unembedding): float32 as get() gives it, or, stored
        as F16 or BF16, a RowTable that stays memory-mapped and converts only the rows asked for.
        Its values are checked here either way, a block of rows at a time."""
        tf = self._where.get(name)
        if tf is None or tf.dtype(name) not in ("F16", "BF16"):
            return self.get(name, shape)
        check_shape(name, tf.shape(name), shape, self.config, tf.path.name, SAVED_WITH)
        table = RowTable(name, tf.raw(name), tf.dtype(name) == "BF16")
        step = max(1, (1 << 22) // max(1, shape[1]))
        for a in range(0, shape[0], step):
            if not np.isfinite(table[a:a + step]).all():
                check_finite(np.asarray(table), name, tf.path.name)  # names the first, as get() does
        return table

    def check(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """What get() checks before reading (present, of `shape`, a float type), nothing read: a
        zero placeholder with one element per axis."""
        tf = self._where.get(name)
        if tf is None:
            raise self.missing(name)
        check_shape(name, tf.shape(name), shape, self.config, tf.path.name, SAVED_WITH)
        if not tf.is_float(name):
            raise ModelLoadError(f"tensor {name} in {tf.path.name} is stored as {tf.dtype(name)}, but it "
                                 f"must be a float type ({', '.join(FLOAT_DTYPES)})")
        return np.zeros((1,) * len(shape), dtype=np.float32)
