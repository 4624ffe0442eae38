"""A GGUF model whose layers are packed lets go of the file's pages it packed, and keeps none of the
file's pages in use: its norm gains are copies, not views of the file (reading a view would map back
the pages around it, packed neighbours too: a kernel may map a file a large folio per fault)."""

import struct
import sys

import numpy as np
import pytest

from attnviz.engine.computing.load import load_gguf
from attnviz.engine.reading.gguf_file import open_gguf
from gguf_files import Q, gguf_tensors, write_gguf
from tiny import FIXTURES

pytest.importorskip("numba")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/pagemap")


def _mapped_pages(path, at: int | None = None) -> set[int]:
    """The pages of file `path` (their index in the file) mapped in this process now (`at`: in the
    mapping that holds address `at` alone, not another model's of the same file)."""
    pages = set()
    with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
        for line in maps:
            p = line.split()
            if len(p) < 6 or p[5] != str(path):
                continue
            lo, hi = (int(x, 16) for x in p[0].split("-"))
            if at is not None and not lo <= at < hi:
                continue
            pagemap.seek(lo // 4096 * 8)
            entries = pagemap.read((hi - lo) // 4096 * 8)
            first = int(p[2], 16) // 4096
            pages |= {first + i for i in range((hi - lo) // 4096)
                      if struct.unpack_from("Q", entries, i * 8)[0] >> 63}  # bit 63: present
    return pages


def test_a_packed_load_leaves_no_page_of_a_packed_tensor_mapped(tmp_path, kernels):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "q4_1.gguf", cfg, tensors, Q.Q4_1).resolve()
    model = load_gguf(path)
    assert model.weights.packed_types
    reader = open_gguf(path)
    packed = {t.name: range((t.data_offset) // 4096, (t.data_offset + t.n_bytes - 1) // 4096 + 1)
              for t in reader.tensors if t.name.startswith("blk.") and t.tensor_type == Q.Q4_1}
    del reader
    assert len(packed) >= 5 * cfg["num_hidden_layers"]  # (ffn_down: F32, its rows are no blocks)
    mapped = _mapped_pages(path)
    assert mapped, "the file is mapped (the embedding is read from it)"
    held = {name: sorted(mapped.intersection(pages)) for name, pages in packed.items()}
    assert not any(held.values()), {n: p for n, p in held.items() if p}


def test_a_float32_vector_is_a_copy_not_a_view_of_the_file(tmp_path):
    from attnviz.engine.reading import gguf_tensors as G

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "f32.gguf", cfg, tensors)
    ts = G.GGUFTensors(open_gguf(path), path)
    d = cfg["hidden_size"]
    gain = ts.get("blk.0.attn_norm.weight", (d,))
    np.testing.assert_array_equal(gain, tensors["blk.0.attn_norm.weight"])
    assert not np.shares_memory(gain, ts.stored("blk.0.attn_norm.weight", (d,)).data)


def test_a_tensor_released_again_and_again_is_released_once_by_release_again(tmp_path, monkeypatch):
    """Each run that reads a layer's W_O alone releases it again; release_again (the load's last
    step) then releases each tensor once, not once for every time a run released it."""
    from attnviz.engine.reading import gguf_tensors as G

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "q8.gguf", cfg, tensors, Q.Q8_0)
    ts = G.GGUFTensors(open_gguf(path), path)
    d = cfg["hidden_size"]
    for _ in range(5):
        ts.release("blk.0.attn_output.weight", (d, d))
    ts.release("blk.1.attn_output.weight", (d, d))
    calls = []
    monkeypatch.setattr(G, "release_pages", lambda region: calls.append(region.nbytes))
    ts.release_again()
    assert len(calls) == 2


def _lazy_model(tmp_path, monkeypatch):
    """A Q4_1 file loaded lazily (each layer read when a run first needs it), with no kernel warm-up
    reading the layers' views on a thread of its own: only the runs read the file."""
    from attnviz.engine.computing import load

    monkeypatch.setattr(load, "warm_kernels", lambda model, extras: None)
    monkeypatch.setattr(load, "warm_few_rows_meanwhile", lambda qtypes: None)
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    path = write_gguf(tmp_path / "q4_1.gguf", cfg, tensors, Q.Q4_1).resolve()
    model = load.load_gguf(path, eager=False)
    assert model.weights.packed_types
    return model, path


def test_runs_of_a_lazy_load_leave_no_page_of_a_packed_tensor_mapped(tmp_path, kernels, monkeypatch):
    """A lazy load never calls release_again: each layer read after it (its packed view, a run's W_O
    read alone for the value norms) lets go again of the released tensors around it that the read
    mapped back."""
    from attnviz.engine.computing.request import RunRequest

    model, path = _lazy_model(tmp_path, monkeypatch)
    for text in ("1, 2, 3, 4", "1, 2, 3, 5"):  # (token ids: the file has no tokenizer)
        assert model.run(text, request=RunRequest(values=True)).value_norms is not None
    reader = open_gguf(path)
    packed = {t.name: range(t.data_offset // 4096, (t.data_offset + t.n_bytes - 1) // 4096 + 1)
              for t in reader.tensors if t.name.startswith("blk.") and t.tensor_type == Q.Q4_1}
    del reader
    mapped = _mapped_pages(path)
    assert mapped, "the file is mapped (the embedding is read from it)"
    held = {name: sorted(mapped.intersection(pages)) for name, pages in packed.items()}
    assert not any(held.values()), {n: p for n, p in held.items() if p}


def test_w_o_is_read_alone_once_and_never_again_for_later_value_weighted_runs(tmp_path, kernels, monkeypatch):
    """The first value-weighted run reads every layer's W_O alone (for its Grams, kept with the
    model) and lets go of it and its released neighbours: a few release_pages calls a layer, never
    a walk over every released tensor per read. Later runs read no W_O again; their one call at
    most is the new token's embedding row letting go of the table's neighbours (this tiny table
    lies all within a folio's reach of them)."""
    from attnviz.engine.computing.request import RunRequest
    from attnviz.engine.reading import gguf_tensors as G

    model, _ = _lazy_model(tmp_path, monkeypatch)
    request = RunRequest(values=True)
    model.run("1, 2, 3, 4")  # (the layers' views read; token ids: no tokenizer)
    calls, real = [], G.release_pages
    monkeypatch.setattr(G, "release_pages", lambda region: calls.append(region.nbytes) or real(region))
    store = model.weights.layers
    reads, output = [], store.output
    monkeypatch.setattr(store, "output", lambda i: reads.append(i) or output(i))
    per_run = []
    for n in range(6):
        before = len(calls)
        assert model.run(f"1, 2, 3, {5 + n % 3}", request=request).value_norms is not None  # one new row each
        per_run.append(len(calls) - before)
    n_layer = model.config.n_layer
    assert reads == list(range(n_layer)), reads
    assert n_layer <= per_run[0] <= 2 * n_layer + 1 and max(per_run[1:]) <= 1, per_run


def test_an_embedding_row_at_the_tables_end_leaves_the_next_layers_pages_unmapped(smollm2_packed):
    """SmolLM2's token_embd lies just before blk.0 in its file. A row near the table's end read
    after the table's pages were let go (as a Compare's pass over the tied unembedding lets them
    go) maps back the released blk.0 pages beside it, a large folio or fault-around per fault; the
    read lets go of them again, in a run of two new rows and in a keystroke's one."""
    from attnviz.engine.reading.gguf_tensors import release_pages

    model = smollm2_packed
    path = model.path.resolve()
    table = model.weights.tok_emb
    reader = open_gguf(path)
    packed = {t.name: range(t.data_offset // 4096, (t.data_offset + t.n_bytes - 1) // 4096 + 1)
              for t in reader.tensors if t.name.startswith("blk.") and t.tensor_type == Q.Q4_1}
    del reader
    model.clear_cache()
    last = table.shape[0] - 1
    for ids in ([5, last - 1], [5, last - 1, last - 2]):  # two rows, then one new row
        release_pages(np.asarray(table.data))
        model.run(ids=ids)
        mapped = _mapped_pages(path, at=np.asarray(table.data).ctypes.data)  # (this model's mapping)
        held = {name: sorted(mapped.intersection(pages)) for name, pages in packed.items()}
        assert not any(held.values()), (ids, {n: p for n, p in held.items() if p})
