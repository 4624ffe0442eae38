"""The bundled models the window tests open again and again (MiniLM, SmolLM2's GGUF), read from
their files once a session: each later load of one gives a new Model (its own layer store, budget,
KV cache, output head and tokenizer object) over the arrays the first load read, which no model
writes to (tests/engine/test_shared_models.py edits one model and checks another). A load with a
budget, a lazy load, a chosen memory budget or any other source goes to the engine's own load,
which reads its files; so does a load with a text to build the tokenizer for, where the model's
vocabulary is SentencePiece (the one kind a text changes: gguf_tokenizer builds it for the text),
not MiniLM's WordPiece nor SmolLM2's byte-level BPE (a window's load names its first text)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from attnviz.engine import DEFAULT_MODEL, Model, resolve
from attnviz.engine.computing.load import warm_kernels
from attnviz.engine.reading.budget import LayerStore
from attnviz.engine.reading.memory_budget import chosen_budget
from attnviz.engine.reading.qpack import kernels_on, rest_later
from attnviz.engine.reading.registry import smollm2_file
from attnviz.engine.reading.token_text import SENTENCEPIECE

MINILM = "all-MiniLM-L6-v2"


def bundled_files() -> set[Path]:
    """The files a shared load may come from: MiniLM's folder and SmolLM2's GGUF (where installed)."""
    files = {resolve(MINILM)[1].resolve(), smollm2_file()}
    return {Path(f).resolve() for f in files if f is not None}


class SharingLoader:
    """load_model's stand-in: a bundled model read once (with `real`, the engine's load_model) per
    source, kernels asked for or not and file version; every call gives a new Model over it."""

    def __init__(self, real):
        self.real = real
        self.first: dict = {}  # key -> the Model the first load read (never run, never handed out)
        self.files = bundled_files()

    def key(self, name_or_dir, budget, eager):
        if budget is not None or not eager or chosen_budget() is not None:
            return None
        try:
            name, where, license = resolve(name_or_dir)
        except Exception:  # the engine's load says what is wrong with the source
            return None
        where = Path(where).resolve()
        if where not in self.files:
            return None
        stat = (where / "config.json" if where.is_dir() else where).stat()
        return name, str(where), license, kernels_on(), stat.st_mtime_ns, stat.st_size

    def __call__(self, name_or_dir=DEFAULT_MODEL, budget=None, eager=True, text=None):
        key = self.key(name_or_dir, budget, eager)
        if key is None:
            return self.real(name_or_dir, budget=budget, eager=eager, text=text)
        first = self.first.get(key)
        if first is None:
            first = self.first[key] = self.real(name_or_dir)
        if text is not None and first.tokenizer is not None and first.tokenizer.kind == SENTENCEPIECE:
            return self.real(name_or_dir, budget=budget, eager=eager, text=text)  # (its own tokenizer)
        return fresh_model(first)


def fresh_model(first: Model) -> Model:
    """A new Model over `first`'s read-only arrays: its layers a LayerStore.shared() of first's,
    its tokenizer a copy of the object (the same vocabulary inside), and the kernels warmed as a
    load warms them."""
    w = first.weights
    layers = w.layers.shared() if isinstance(w.layers, LayerStore) else w.layers
    model = Model(first.name, first.path, first.config, dataclasses.replace(w, layers=layers),
                  copy.copy(first.tokenizer), license=first.license, notice=first.notice)
    warm_kernels(model, extras=not rest_later())
    return model


class SharingQuantizer:
    """quantized_model's stand-in: the bundled SmolLM2 quantized once per type (kernels asked for
    or not, and the source's tables it shares) with `real`, the engine's quantized_model; every
    call gives a new Model over that copy (fresh_model: its own layer store, budget, KV cache and
    output head), the copy itself never run nor handed out. Any other source, or a chosen memory
    budget, goes to `real`."""

    def __init__(self, real):
        self.real = real
        self.first: dict = {}  # key -> the quantized Model the first call made
        self.files = bundled_files()

    def key(self, model: Model, qtype: str):
        from attnviz.engine.computing.quantized import shared_tables

        where = Path(model.path).resolve()
        if model.quantization is not None or chosen_budget() is not None or where not in self.files:
            return None
        stat = where.stat()
        # (the first copy holds the tables it shares, so their ids stay theirs)
        tables = tuple(sorted((name, id(t)) for name, t in shared_tables(model).items()))
        return str(where), str(qtype), kernels_on(), stat.st_mtime_ns, stat.st_size, tables

    def __call__(self, model: Model, qtype: str) -> Model:
        key = self.key(model, qtype)
        if key is None:
            return self.real(model, qtype)
        first = self.first.get(key)
        if first is None:
            first = self.first[key] = self.real(model, qtype)
        out = fresh_model(first)
        out.quantization = first.quantization
        return out
