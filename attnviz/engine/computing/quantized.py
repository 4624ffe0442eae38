"""A loaded model quantized in memory: the values a GGUF file of that type would give attnviz.

The quantization happens where the tensors are read, before any layer is built: the model's source
(its safetensors folder or GGUF file, memory-mapped) is read through a wrapper that hands out each
weight matrix quantized to the type and dequantized back to float32 (engine/reading/quantize.py
says which tensors and how), and the family's own loader builds the layers from it as for any
model. The layers therefore live in the same memory budget (engine/reading/budget.py): a layer is
quantized when the store expands it, and one the budget drops is quantized again from the source
when a run next needs it. The token embedding (and an untied output head) of the Llama family
stays in its quantized bytes and only the rows a run uses are dequantized, as from a GGUF file.
Such a table is quantized a block of rows at a time (the whole table in float32 is never held),
and where its bytes come out equal to the source model's table (Q8_0 of a Q8_0 table), the copy
shares the source's table instead of holding its own.

A GGUF source in a process that asked for the quantised kernels (qpack.kernels_on) gives a copy
held as a GGUF file of that type is: each layer matrix is quantized once at load and packed in the
kernels' layout (engine/reading/gguf_model.py), with no float32 copy of a packed matrix; a long run
or a whole-matrix analysis expands a layer within the budget, quantizing its matrices again.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

from attnviz.engine.reading.safetensors_model import LOADERS
from attnviz.engine.computing.model import Model
from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.reading.gguf_file import architecture, open_gguf
from attnviz.engine.reading.gguf_model import load_llama_gguf
from attnviz.engine.reading.gguf_tensors import GGUFTensors, QuantRows, release_pages
from attnviz.engine.reading.quantize import (
    FALLBACK,
    block_size,
    is_quantized,
    quant_type,
    quantize_rows,
    round_trip,
    stored_type,
    tensor_values,
)
from attnviz.engine.reading.validate import check_finite
from attnviz.engine.reading.weights import Checkpoint

# GPT-2's Conv1D matrices are stored [in, out]: a GGUF row (one output's weights) is a column here
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def quantized_model(model: Model, qtype: str) -> Model:
    """`model` with every 2-D weight matrix quantized to `qtype` (one of quantize.QUANT_TYPES) and
    dequantized back to float32, as a GGUF file of that type gives it; norms and other 1-D tensors
    unchanged. A new Model of the same config and tokenizer, named "<name> as <TYPE>", read from
    the same source as `model`; its notice names the matrices kept at F16 because their rows do not
    fit the type's blocks. InputError for an unknown type or a model that is itself a quantized
    copy (its values are not in its source); ModelLoadError when the source no longer opens or the
    memory budget cannot hold one more layer."""
    qt = quant_type(qtype)
    if model.quantization is not None:
        raise InputError(f"{model.name} is a copy quantized in memory: quantize the model it was "
                         "made from instead")
    path = Path(model.path)
    name = f"{model.name} as {qt.name}"
    if path.is_file():  # a GGUF file (a safetensors model is a folder)
        reader = open_gguf(path)
        ts = QuantizedGGUFTensors(reader, path, qt, shared_tables(model))
        # packed as a file of the type is where the kernels are on (module docstring)
        weights = load_llama_gguf(model.config, architecture(reader), ts, None, name)
        kept = ts.kept_f16
        release_pages(reader.data)  # the header and small tensors read at load (read back if used)
    else:
        ckpt = QuantizedCheckpoint(Checkpoint(path), qt, model.config.family == "gpt2")
        weights = LOADERS[model.config.family](model.config, ckpt, None, name)
        kept = ckpt.kept_f16
    notice = "; ".join(n for n in (model.notice, kept_notice(kept, qt)) if n) or None
    out = Model(name, path, model.config, weights, model.tokenizer, license=model.license,
                notice=notice)
    out.quantization = qt.name
    out.no_tokenizer = model.no_tokenizer  # (its notice alone: the F16 one is no reason)
    return out


def kept_notice(kept: dict, qtype: GGMLQuantizationType) -> str | None:
    """{tensor name: row length} of the matrices kept at F16 -> one line for the user (None: none)."""
    if not kept:
        return None
    shown = ", ".join(f"{n} ({c} a row)" for n, c in list(kept.items())[:3])
    more = f" and {len(kept) - 3} more" if len(kept) > 3 else ""
    return (f"{len(kept)} matri{'ces' if len(kept) > 1 else 'x'} kept at F16: rows not a whole "
            f"number of {qtype.name}'s {block_size(qtype)}-value blocks: {shown}{more}")


def _kept_f16(shapes: dict, qtype: GGMLQuantizationType, row_axis) -> dict:
    """{name: row length} of the quantized matrices among `shapes` (name -> shape) that fall back
    to F16; `row_axis(name)`: the axis that runs along a GGUF row."""
    out = {}
    for n, shape in shapes.items():
        if is_quantized(n, shape):
            cols = shape[row_axis(n)]
            if stored_type(qtype, cols) == FALLBACK != qtype:
                out[n] = cols
    return out


class QuantizedCheckpoint:
    """A safetensors Checkpoint whose weight matrices read back quantized (as Checkpoint's methods,
    which the family loaders call)."""

    def __init__(self, ckpt: Checkpoint, qtype: GGMLQuantizationType, conv1d: bool):
        self._ckpt, self.qtype, self.files, self.config = ckpt, qtype, ckpt.files, ckpt.config
        self._conv1d = conv1d  # GPT-2: its Conv1D matrices are [in, out]
        self.kept_f16 = _kept_f16({n: ckpt.shape(n) for n in ckpt.names()}, qtype,
                                  lambda n: 0 if self._transposed(n) else -1)

    def _transposed(self, name: str) -> bool:
        return self._conv1d and name.endswith(_CONV1D)

    def names(self) -> list[str]:
        return self._ckpt.names()

    def float32_bytes(self) -> int:
        return self._ckpt.float32_bytes()

    def __contains__(self, name: str) -> bool:
        return name in self._ckpt

    def shape(self, name: str) -> tuple[int, ...]:
        return self._ckpt.shape(name)

    def check(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        return self._ckpt.check(name, shape)

    def get(self, name: str, shape: tuple[int, ...], check: bool = True) -> np.ndarray:
        """Float32 tensor `name`, a weight matrix quantized and back (checked finite after)."""
        w = self._ckpt.get(name, shape, check)
        if not is_quantized(name, shape):
            return w
        if self._transposed(name):  # [in, out]: quantized along in, as a GGUF row
            out = round_trip(w.T, self.qtype)[0].T
        else:
            out = round_trip(w, self.qtype)[0]
        if check:  # (F16 turns a value beyond 65504 into inf)
            check_finite(out, name, self._ckpt.files[0].path.name)
        return out

    def rows(self, name: str, shape: tuple[int, int]):
        """An embedding or unembedding [rows, cols] kept in its quantized bytes (QuantRows)."""
        if not is_quantized(name, shape):
            return self._ckpt.rows(name, shape)
        data, used = quantize_rows(self._ckpt.get(name, shape), self.qtype)
        return QuantRows(name, data, used, shape)


def shared_tables(model: Model) -> dict:
    """{tensor name: table} of the model's tables kept in their file's bytes (QuantRows: the token
    embedding, an untied output head), which a quantized copy may share."""
    w = model.weights
    head = w.head.unembed if w.head is not None and w.head.missing is None else None
    return {t.name: t for t in (w.tok_emb, head) if isinstance(t, QuantRows)}


TABLE_ROWS = 2048  # rows of a table requantized at a time (a block's float32, not the table's)


def requantized_table(t, shape: tuple[int, int], qtype: GGMLQuantizationType, source=None):
    """A GGUF tensor entry `t` [rows, cols] dequantized and quantized again to `qtype`, TABLE_ROWS
    rows at a time -> (bytes [rows, row bytes] (F16: float16 [rows, cols]), the type used), or
    `source` itself (a QuantRows of the same tensor) when every byte equals its own. While the
    blocks equal the source's, nothing is written: a table shared in the end is never held twice,
    and the source's pages read for the check are let go (a mapped file's stay in the page cache)."""
    n_rows = shape[0]
    data = np.asarray(t.data).reshape(n_rows, -1)
    out, used, same = None, None, source is not None
    for a in range(0, n_rows, TABLE_ROWS):
        block = data[a:a + TABLE_ROWS]
        got, used = quantize_rows(tensor_values(t._replace(data=block), (len(block), shape[1])), qtype)
        release_pages(block)
        if same:
            theirs = np.asarray(source.data[a:a + TABLE_ROWS])
            same = used == source.qtype and np.array_equal(got, theirs)
            release_pages(theirs)
            if same:
                continue
            out = np.empty((n_rows, *got.shape[1:]), got.dtype)
            if a:  # the blocks before this one: the source's bytes (of this same type)
                out[:a] = source.data[:a]
                release_pages(np.asarray(source.data[:a]))
        if out is None:
            out = np.empty((n_rows, *got.shape[1:]), got.dtype)
        out[a:a + len(got)] = got
    return (source, used) if same else (out, used)


class QuantizedGGUFTensors(GGUFTensors):
    """A GGUF file's tensors with every 2-D one given at `qtype` (F16 where its rows do not fit the
    type's blocks): its values dequantized from the file, quantized again. `shared`: the source
    model's quantized tables by name (shared_tables), shared where the copy's bytes equal them."""

    def __init__(self, reader, path: Path, qtype: GGMLQuantizationType, shared: dict | None = None):
        super().__init__(reader, path)
        self.qtype = qtype
        self.shared = shared or {}
        self.kept_f16 = _kept_f16({n: self.shape(n) for n in self._table}, qtype, lambda n: -1)

    def rows(self, name: str, shape: tuple[int, int]):
        """A table kept in its quantized bytes (QuantRows), requantized a block of rows at a time;
        the source model's own table where the bytes are the same."""
        t = self.check(name, shape)
        if not is_quantized(name, shape):
            return super().rows(name, shape)
        try:
            data, used = requantized_table(t, shape, self.qtype, self.shared.get(name))
        except NotImplementedError:
            raise ModelLoadError(f"tensor {name} is stored as {t.tensor_type.name}, which the gguf "
                                 "package cannot dequantise") from None
        if isinstance(data, QuantRows):
            return data
        return QuantRows(name, data, used, shape)

    def stored(self, name: str, shape: tuple[int, ...]):
        """The entry of a weight matrix at the copy's type (Requantized: its blocks made when read),
        any other tensor's as the file stores it."""
        t = self.check(name, shape)
        if not is_quantized(name, shape):
            return t
        return Requantized(self, t, shape, stored_type(self.qtype, shape[-1]))

    def requantized(self, t, shape: tuple[int, ...]) -> np.ndarray:
        """File tensor `t` [rows, cols] quantized to the copy's type -> its bytes [rows, row bytes]
        (F16: float16 [rows, cols]); the source's pages read for it are let go."""
        try:
            w = tensor_values(t, shape)
        except NotImplementedError:
            raise ModelLoadError(f"tensor {t.name} is stored as {t.tensor_type.name}, which the "
                                 "gguf package cannot dequantise") from None
        data, _ = quantize_rows(w, self.qtype)
        release_pages(np.asarray(t.data))
        return data

    def release(self, name: str, shape: tuple[int, ...]) -> None:
        """Nothing to let go: a matrix's blocks are made in memory, and requantized let go of the
        source's pages it read."""


class Requantized:
    """A GGUF tensor entry (as gguf's ReaderTensor reads) at a quantized copy's type: its type known
    now, its blocks quantized when `data` is read (the packing at load only asks most entries for
    their type)."""

    def __init__(self, ts: QuantizedGGUFTensors, t, shape: tuple[int, ...], qtype: GGMLQuantizationType):
        self._ts, self._t, self._shape = ts, t, shape
        self.name, self.tensor_type, self.shape, self.n_elements = t.name, qtype, t.shape, t.n_elements

    @property
    def data(self) -> np.ndarray:
        return self._ts.requantized(self._t, self._shape)
