"""Opening a model: what a loader read (engine/reading/safetensors_model.py from a folder,
engine/reading/gguf_model.py from a GGUF file) made into a `Model`, found by name or path
(engine/reading/registry.py)."""

from __future__ import annotations

import threading
from pathlib import Path

from attnviz.engine.computing.model import Model
from attnviz.engine.reading.gguf_model import read_gguf
from attnviz.engine.reading.layout import ReadModel
from attnviz.engine.reading.registry import DEFAULT_MODEL, resolve
from attnviz.engine.reading.safetensors_model import read_folder


def model_of(read: ReadModel) -> Model:
    return Model(read.name, read.path, read.config, read.weights, read.tokenizer,
                 license=read.license, notice=read.notice)


def load_folder(path: Path, name: str | None = None, license: str | None = None,
                budget: int | None = None) -> Model:
    """Load a checkpoint folder (config.json + safetensors [+ tokenizer.json]); its layers are
    expanded to float32 within the memory budget (`budget` bytes, else the one chosen with
    memory_budget.set_memory_budget, else the default from the memory available)."""
    return model_of(read_folder(path, name=name, license=license, budget=budget))


def load_gguf(path: Path, name: str | None = None, license: str | None = None,
              budget: int | None = None, eager: bool = True, text: str | None = None) -> Model:
    """Load a GGUF model file: config from its metadata, tokenizer built, layers expanded to float32
    within the memory budget (`budget` bytes, else the one chosen, else the default); `eager=False`
    leaves each layer in the file until a run first needs it; `text`: the text a one-shot command
    will encode (reading/gguf_model.py gguf_tokenizer)."""
    from attnviz.engine.reading.qpack import rest_later

    later = rest_later()
    # a window's load (rest_later) starts its few-row kernels as soon as the file's types are known;
    # a one-shot command's packing, which the warm-up's imports would slow, comes first
    model = model_of(read_gguf(path, name=name, license=license, budget=budget, eager=eager, text=text,
                               packing=warm_few_rows_meanwhile if later else None))
    if not later:  # (a process that warms the rest later: the read started all a load warms)
        warm_kernels(model, extras=True)
    return model


def warm_few_rows_meanwhile(qtypes) -> threading.Thread | None:
    """The kernels a run of a few rows takes on `qtypes` (a GGUF file's packed block types; none:
    nothing to do), numba imported and the kernels compiled or loaded from its cache on a thread
    of their own, while the load goes on to the tokenizer and the layers: the model's first run
    waits for them (qmatvec.takes_layer), and waits less once they have started early."""
    if not qtypes:
        return None

    def warm():
        from attnviz.engine.computing.qmatvec import warm_few_rows

        warm_few_rows(qtypes)
    # not a daemon: exit waits for it, as for a compile (qmatvec), not tearing down LLVM mid-import
    t = threading.Thread(target=warm, name="qmatvec-warm-few-rows")  # (qmatvec.WARM_THREAD's: not imported here)
    t.start()
    return t


def warm_kernels(model: Model, extras: bool) -> None:
    """Where the model's layers multiply few rows on their blocks, their kernels compiled (or
    loaded) on a thread of their own, off the typing path; with `extras` (false where the process
    warms those later itself: qpack.rest_later) also their serial twins and the one-row steps,
    the one-row block for the scale types some layer runs it with (qmatvec.block_scales), then
    the model's stack of every layer's blocks (onerow_stack.prepare)."""
    if model.weights.packed_types:
        from attnviz.engine.computing import onerow_stack
        from attnviz.engine.computing.layers import layer_for
        from attnviz.engine.computing.qmatvec import warm_in_background
        warm_in_background(model.weights.packed_types, extras=extras, layers=packed_views(model),
                           then=(lambda: onerow_stack.prepare(model.weights.layers, model.config.n_layer, layer_for))
                           if extras else None)


def packed_views(model):
    """The model's layers as a one-row run on the kernels sees them (its packed views, None where
    a layer has none), one at a time: read where they are asked for (a thread warming kernels)."""
    layers = model.weights.layers
    view = getattr(layers, "packed_view", None)
    return (view(i) if view is not None else None for i in range(model.config.n_layer))


def load_model(name_or_dir: str | Path = DEFAULT_MODEL, budget: int | None = None,
               eager: bool = True, text: str | None = None) -> Model:
    """Load a model by name (see registry.find_models), from a folder holding config.json +
    safetensors, or from a GGUF file; `budget`: bytes of float32 layers to keep expanded (default:
    the budget chosen with memory_budget.set_memory_budget, else from the memory available).
    `eager=False`: a GGUF file's layers are expanded when a run first reaches them, not at load
    (safetensors layers always are: they are memory-mapped). `text`: the text a one-shot command
    will encode, which a GGUF file's SentencePiece vocabulary builds its tokenizer for first."""
    name, where, license = resolve(name_or_dir)
    if where.is_file():  # resolve() gives a file only for GGUF
        return load_gguf(where, name=name, license=license, budget=budget, eager=eager, text=text)
    return load_folder(where, name=name, license=license, budget=budget)
