"""A model let go is freed whole, whatever ran on it: the one-row steps keep a plan per packed layer
(onerow_block._plan) only while that layer lives, so a quantized twin opened, typed into and closed
again and again (the window's Compare) holds no more memory after many twins than after one."""

import gc
import json
import os
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.quantized import quantized_model
from attnviz.engine.reading import qpack
from gguf_files import gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")

D_FF = 1024
IDS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8])


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny Llama (GQA) GGUF in F32, the model A that Compare quantizes, with an MLP of 1024: its
    down projection's rows divide into Q8_0's blocks (every matrix of the twin packed, as the
    one-row steps take a layer), and a twin's packed layers outweigh the few objects a run leaves
    in bounded caches."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    rng = np.random.default_rng(7)
    for i in range(cfg["num_hidden_layers"]):
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            shape = (cfg["hidden_size"], D_FF) if name == "ffn_down" else (D_FF, cfg["hidden_size"])
            tensors[f"blk.{i}.{name}.weight"] = (rng.standard_normal(shape) * 0.2).astype(np.float32)
    return write_gguf(tmp_path_factory.mktemp("src") / "f32.gguf", dict(cfg, intermediate_size=D_FF), tensors)


def type_into(model, ids) -> None:
    """Keystrokes' runs on the model's KV cache: the first whole, each next one row (the steps)."""
    for k in range(4, len(ids) + 1):
        model.run(ids=ids[:k])


def test_a_twin_typed_into_is_freed_with_its_packed_layers(source):
    qpack.ask_for_kernels()
    try:
        qm.warm([Q.Q8_0])
        a = load_gguf(source)
        b = quantized_model(a, "Q8_0")
        type_into(b, IDS)
        store = b.weights.layers
        layers = [weakref.ref(store.packed_view(i).packed) for i in range(b.config.n_layer)]
        twin = weakref.ref(b)
        del b, store
        gc.collect()
        assert twin() is None
        assert [ref() for ref in layers] == [None] * len(layers)
    finally:
        qpack.ask_for_kernels(False)


@pytest.mark.parametrize("which", ["file", "twin", "safetensors"])
def test_a_model_let_go_is_freed_without_the_cyclic_collector(source, tmp_path, which):
    """Its layer store and layers go when the last reference does: the window freezes start-up's
    objects out of the collector's way (tuning.freeze_start_up_objects), so a first model in a
    reference cycle, replaced later, would be held until the window closes."""
    from gguf import GGMLQuantizationType as Q

    from attnviz.engine import load_model
    from tiny import tiny_llama

    qpack.ask_for_kernels()
    try:
        qm.warm([Q.Q8_0])
        if which == "safetensors":
            model = load_model(tiny_llama(tmp_path / "llama"))
        else:
            cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
            model = load_gguf(write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0))
            if which == "twin":
                model = quantized_model(load_gguf(source), "Q8_0")
        model.run(ids=IDS[:5])
        model.run(ids=IDS[:6])
        store = model.weights.layers
        refs = [weakref.ref(model), weakref.ref(store), weakref.ref(store[0])]
        view = getattr(store, "packed_view", lambda i: None)(0)
        if which != "safetensors":
            assert view is not None and view.packed is not None
            refs.append(weakref.ref(view.packed))
        gc.collect()
        was_on = gc.isenabled()  # (a window's runner may have switched it off for the process)
        gc.disable()
        try:
            del model, store, view
            assert [ref() for ref in refs] == [None] * len(refs)
        finally:
            if was_on:
                gc.enable()
    finally:
        qpack.ask_for_kernels(False)



def test_a_gguf_reader_let_go_is_freed_without_the_cyclic_collector(tmp_path):
    """A GGUF file's reader, its string arrays read every way a load reads them (decoded, a
    string's length and bytes, the array's bytes undecoded), goes with its last reference: one
    left to the cyclic collector keeps its view of the whole file until a collection, or until the
    window closes where start-up's freeze (tuning.freeze_start_up_objects) came first."""
    from gguf_files import write_vocab_gguf

    from attnviz.engine.reading.gguf_file import metadata, open_gguf, string_bytes

    tokens = ["a", "Ġthe", "日本"]
    path = write_vocab_gguf(tmp_path / "vocab.gguf", {"tokenizer.ggml.tokens": tokens,
                                                      "tokenizer.ggml.merges": ["Ġ t", "h e"]})
    reader = open_gguf(path)
    field = reader.fields["tokenizer.ggml.tokens"]
    assert metadata(reader, "tokenizer.ggml.tokens") == tokens
    assert int(field.parts[-2][0]) == 6 and bytes(field.parts[-1]) == "日本".encode()
    blob, begins, stops = string_bytes(reader, "tokenizer.ggml.merges")
    assert blob[begins[1]:stops[1]] == b"h e"
    gone = weakref.ref(reader)
    was_on = gc.isenabled()
    gc.disable()
    try:
        del reader, field
        assert gone() is None
    finally:
        if was_on:
            gc.enable()

# (in a process of its own: no other test's models or plans, Python's allocations traced from the start)
TWINS = """
import gc, json, sys, tracemalloc
import numpy as np
from gguf import GGMLQuantizationType as Q
sys.path[:0] = sys.argv[2:4]
from test_freed_models import IDS, type_into
from attnviz.engine.computing import qmatvec as qm
from attnviz.engine.computing.load import load_gguf
from attnviz.engine.computing.quantized import quantized_model
from attnviz.engine.reading import qpack
from attnviz.engine.parallel import limit_kernel_threads
limit_kernel_threads(1)  # (keystrokes as the window runs them; a pair's partner lets a call go just after it)
qpack.ask_for_kernels()
qm.warm([Q.Q8_0])
a = load_gguf(sys.argv[1])
type_into(a, IDS)
tracemalloc.start()
held, packed = [], 0
for n in range(6):
    b = quantized_model(a, "Q8_0")
    type_into(b, IDS)
    packed = b.weights.layers.view_bytes()
    del b
    gc.collect()
    held.append(tracemalloc.get_traced_memory()[0])
print(json.dumps({"held": held, "packed": packed}))
"""


def test_twins_opened_again_and_again_hold_what_one_held(source):
    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", TWINS, str(source), str(here), str(here.parent)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    held, packed = out["held"], out["packed"]
    assert packed > 0  # (each twin held its layers packed: what a kept plan would keep)
    # four more twins than the second: less than one twin's packed layers more (each kept: four)
    assert held[-1] - held[1] < packed / 2, (held, packed)
