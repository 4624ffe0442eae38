"""The memory line (Model.memory) names what a model keeps beside its layers at that moment, with
its bytes, each array once: the unembedding's float32 copy from the pass it starts keeping it on,
embeddings an F16 file's table was converted to float32 for (a tied unembedding counted once with
them), a copy quantized in memory's tables, then the W_O Grams; a table that stays in its mapped
file is the file's, not named."""

import shutil

import numpy as np
from safetensors.numpy import load_file, save_file

from attnviz.engine import load_model
from attnviz.engine.computing import logits as L
from attnviz.engine.computing.quantized import quantized_model
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.memory_budget import grams_bytes
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6]


def _pass(model) -> None:
    """One pass over the model's unembedding (a row's logits)."""
    model.lm_head().logits(np.ones((1, model.config.d_model), np.float32))


def test_the_unembeddings_float32_copy_is_named_from_the_pass_that_keeps_it(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    model = load_model(write_gguf(tmp_path / "m.gguf", cfg, tensors, Q.Q8_0))
    c, line = model.config, model.weights.layers.describe()
    _pass(model)  # streamed: the file's blocks, nothing kept
    assert model.memory == line
    model.lm_head().w_u.expect_passes(L.FILL_PASSES + 1)
    _pass(model)
    assert model.memory == f"{line}; also kept: unembedding as float32 ({format_bytes(4 * c.vocab_size * c.d_model)})"
    model.set_memory_budget(model.weights.layers.budget)  # the head (and its copy) let go
    assert model.memory == model.weights.layers.describe()


def test_embeddings_converted_to_float32_are_named_and_a_tied_unembedding_counted_once(tmp_path):
    """GPT-2 in F16: its token and position embeddings converted to float32 at load; its
    unembedding is the token embedding, also after the head is built. In F32 they are the file's."""
    folder = shutil.copytree(FIXTURES / "gpt2", tmp_path / "f16")
    tensors = load_file(str(folder / "model.safetensors"))
    save_file({k: v.astype(np.float16) for k, v in tensors.items()}, str(folder / "model.safetensors"))
    model = load_model(folder)
    c = model.config
    want = (f"{model.weights.layers.describe()}; also kept: embeddings and tied unembedding as float32 "
            f"({format_bytes(4 * (c.vocab_size + c.max_positions) * c.d_model)})")
    assert model.memory == want
    model.lm_head()
    assert model.memory == want
    f32 = load_model(FIXTURES / "gpt2")
    f32.lm_head()
    assert f32.memory == f32.weights.layers.describe()


def test_a_quantized_copys_tables_its_float32_copy_and_grams_each_once():
    """A copy quantized to Q8_0 in memory keeps its token embedding and its (untied) unembedding
    in Q8_0 blocks (34 bytes a block of 32 values), then the float32 copy, then the Grams."""
    model = quantized_model(load_model(FIXTURES / "llama_gqa"), "Q8_0")
    c, line = model.config, model.weights.layers.describe()
    tables = f"token embedding and unembedding as Q8_0 ({format_bytes(2 * 34 * c.vocab_size * c.d_model // 32)})"
    assert model.memory == f"{line}; also kept: {tables}"
    model.lm_head().w_u.expect_passes(L.FILL_PASSES + 1)
    _pass(model)
    model.run(ids=IDS, request=RunRequest(values=True, use_cache=False))
    assert model.memory == (f"{line}; also kept: {tables}, unembedding as float32 "
                            f"({format_bytes(4 * c.vocab_size * c.d_model)}), W_O Grams for 2 of 2 layers "
                            f"({format_bytes(grams_bytes(c))})")


def test_the_memory_line_and_the_caches_bytes_find_one_owner(tmp_path):
    """One answer to whose memory an array lies in (pages.owner), for the memory line and the KV
    cache's bytes (run_result.allocated_bytes) alike: a view of a view counts the array it
    views once, and a slice of a memory-mapped file counts nothing (the file's pages)."""
    from attnviz.engine.computing.run_result import allocated_bytes
    from attnviz.engine.reading.pages import owner

    buffer = np.zeros((4, 64), np.float32)
    nested = np.ndarray((2, 8), np.float32, buffer=buffer[1:3, :16].copy().view(np.uint8).view(np.float32))
    np.zeros(256, np.float32).tofile(tmp_path / "pages")
    mapped = np.memmap(tmp_path / "pages", np.float32, "r")[16:]
    arrays = [buffer[0], buffer[1:].T, nested, mapped]
    assert [owner(a) is not None for a in arrays] == [True, True, True, False]
    assert owner(buffer[1:].T) is buffer and owner(mapped) is None
    assert allocated_bytes(arrays) == buffer.nbytes + owner(nested).nbytes
    assert allocated_bytes([mapped]) == 0
