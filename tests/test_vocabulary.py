"""One home for each shared constant and rule: what the users of each see (the command line, the
window's state, the exports, the engine and the calculator) is the same value, and a broken input
is refused alike on every path."""

import pytest
from attnviz.engine.computing.request import RunRequest

from attnviz.cli import main


def test_the_shared_defaults_are_what_the_users_get(tmp_path, capsys):
    """An export left to its defaults has the shared text, colormap and width (the window's state
    starts on the same colormap); a width under MIN_WIDTH and an unknown colormap are refused naming
    the shared limits."""
    from attnviz.engine.reading import textbook
    from attnviz.engine.reading.registry import DEFAULT_TEXT
    from attnviz.figures.data import COLORMAPS, DEFAULT_COLORMAP, DEFAULT_WIDTH, MAX_WIDTH, MIN_WIDTH, open_sidecar
    from attnviz.ui.machinery.state import AppState

    assert main(["export", "--model", textbook.TEXTBOOK_NAME, "--out", str(tmp_path / "a.png")]) == 0
    side = open_sidecar(tmp_path / "a.png")
    assert (side["text"], side["colormap"], side["width"]) == (DEFAULT_TEXT, DEFAULT_COLORMAP, DEFAULT_WIDTH)
    assert AppState().colormap == DEFAULT_COLORMAP
    capsys.readouterr()
    assert main(["export", "--model", textbook.TEXTBOOK_NAME, "--out", str(tmp_path / "b.png"),
                 "--width", str(MIN_WIDTH - 1)]) == 2
    assert f"outside {MIN_WIDTH}..{MAX_WIDTH}" in capsys.readouterr().err
    assert main(["export", "--model", textbook.TEXTBOOK_NAME, "--out", str(tmp_path / "b.png"),
                 "--colormap", "nope"]) == 2
    assert f"try {', '.join(COLORMAPS)} (" in capsys.readouterr().err
    assert not (tmp_path / "b.png").exists()


def test_the_users_see_the_same_tuple():
    from attnviz.cli import build_parser
    from attnviz.engine.computing import patterns
    from attnviz.figures import data as export_data
    from attnviz.ui.machinery import state

    assert state.SCALE_MODES is patterns.SCALE_MODES is export_data.SCALE_MODES
    export = build_parser().commands["export"]
    assert "--scale {" + ",".join(patterns.SCALE_MODES) + "}" in export.format_usage()


def test_every_view_counts_the_same_query_heads_per_kv_head(tmp_path):
    """Query heads per KV head, as the model's config, its runs (kv_group), the calculator on its
    config, the anatomy figure and an export of it say it: one number for one model."""
    import numpy as np

    from attnviz.engine import load_model
    from attnviz.engine.calc import calc_inputs_from_config, calculate
    from attnviz.engine.computing.patterns import group_size
    from attnviz.figures.anatomy import make_anatomy_view
    from attnviz.figures.data import make_view
    from tiny import tiny_llama

    for n_head, n_kv in ((8, 2), (4, 4), (4, 1)):
        model = load_model(tiny_llama(tmp_path / f"m{n_head}-{n_kv}", n_head=n_head, n_kv_head=n_kv))
        run = model.run("5, 17, 3, 9", request=RunRequest(values=True, inputs=True))
        want = n_head // n_kv
        assert model.config.n_group == group_size(run.kv_group) == want
        assert calculate(calc_inputs_from_config(model.config)).group_size == want
        assert make_anatomy_view(model, run, 0).n_group == want
        view = make_view(run, model="m", scope="layer", layer=0)
        assert view.grouped == (want > 1) and np.bincount(view.kv_group).tolist() == [want] * n_kv
    assert group_size(np.zeros(0, dtype=np.int64)) == 1


def test_a_colormap_is_sampled_and_indexed_in_one_place():
    """The window and the exports colour a weight the same: one sampling (style.colormap_colors),
    one table (style.heat_table: 0 the gap, 1..255 the colours), one index (style.heat_index)."""
    import numpy as np

    from attnviz.figures.style import colormap_colors, heat_index, heat_positions, heat_table

    lut = heat_table("magma")
    assert lut.shape == (256, 4) and lut[0, 3] == 0 and (lut[1:, 3] == 255).all()
    np.testing.assert_array_equal(lut[1:, :3], colormap_colors("magma", 255))
    w = np.random.default_rng(0).random((3, 5, 5), dtype=np.float32)
    dest = np.zeros(w.shape, np.uint8)
    dest[...] = heat_positions(w, w.max())  # the window's path: positions truncated into its mosaic
    np.testing.assert_array_equal(dest, heat_index(w, w.max()))
    assert dest.min() >= 1 and heat_index(np.float32(w.max()), w.max()) == 255


def test_head_titles_have_one_spelling(tmp_path):
    """patterns.head_title names a head: an exported layer's picture titles each head with it."""
    import re

    from attnviz.engine.computing.patterns import head_title
    from tiny import tiny_llama

    assert head_title(3, 1) == "L3 H1"
    folder = tiny_llama(tmp_path / "m", n_layer=2, n_head=4, n_kv_head=2)
    assert main(["export", "--model", str(folder), "--text", "5, 17, 3", "--layer", "1",
                 "--out", str(tmp_path / "layer.svg")]) == 0
    drawn = re.findall(r">\s*(L\d+ H\d+)", (tmp_path / "layer.svg").read_text(encoding="utf-8"))
    assert drawn == [head_title(1, h) for h in range(4)]


def test_one_config_json_reader(tmp_path, capsys):
    """config.json is read by validate.read_json_object alone (one size cap, one set of messages):
    the engine's loader and `attnviz calc --config` refuse a broken file in the same words (calc
    then says what --config takes)."""
    from attnviz.engine import ModelLoadError, load_model
    from attnviz.engine.calc import from_config
    from attnviz.engine.reading import config, validate

    assert from_config.read_json_object is config.read_json_object is validate.read_json_object
    path = tmp_path / "config.json"
    for broken in ('{"hidden_size": ', "[1, 2]", " " * validate.MAX_JSON_BYTES + "{}"):  # the cap
        path.write_text(broken)
        try:
            load_model(tmp_path)
        except ModelLoadError as exc:
            engine = str(exc)
        assert main(["calc", "--config", str(path)]) == 2
        calc = capsys.readouterr().err.strip()
        assert calc == (f"attnviz calc: error: {engine}; --config takes a config.json, a folder "
                        "holding one, or a .gguf"), (broken[:20], calc, engine)


RAW = {"model_type": "mistral", "hidden_size": 64, "num_attention_heads": 8, "num_hidden_layers": 2,
       "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 50,
       "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "hidden_act": "silu"}


def test_the_engine_and_the_calculator_read_a_config_alike():
    """The rules both apply to a config (hf_config.py: the window, the head width, the MLP width,
    the KV heads) give the engine's ModelConfig and the calculator's inputs the same numbers, and
    a config both must refuse is refused by both."""
    from attnviz.engine.calc import calc_inputs_from_config, calculate
    from attnviz.engine.errors import CalcError, ModelLoadError
    from attnviz.engine.reading.config import config_from_dict

    drop = lambda *keys: {k: v for k, v in RAW.items() if k not in keys}  # noqa: E731
    cases = [RAW, {**RAW, "sliding_window": None}, {**RAW, "sliding_window": 0},
             {**RAW, "sliding_window": 16}, {**RAW, "head_dim": 16},
             {**RAW, "model_type": "qwen2", "sliding_window": 16, "use_sliding_window": False},
             drop("num_key_value_heads"), {**RAW, "num_key_value_heads": 1}]
    for raw in cases:
        cfg = config_from_dict(dict(raw))
        got = calculate(calc_inputs_from_config(dict(raw), seq_len=32))
        inp = got.inputs
        assert (inp.n_kv_head, got.d_head, inp.d_ff) == (cfg.n_kv_head, cfg.d_head, cfg.d_ff), raw
        assert (inp.sliding_window or None) == cfg.sliding_window, raw
    for bad in ({**RAW, "num_key_value_heads": 3}, {**RAW, "hidden_size": 60}):
        with pytest.raises(ModelLoadError):
            config_from_dict(dict(bad))
        with pytest.raises(CalcError):
            calculate(calc_inputs_from_config(dict(bad), seq_len=32))


def test_a_gguf_config_reads_as_its_source_and_its_messages_name_gguf_keys(tmp_path):
    """gguf_config reads each config field from its GGUF key (one table): a GGUF written from a
    config.json reads back as that config, and a bad value is named by its GGUF key."""
    import dataclasses

    from attnviz.engine import ModelLoadError, load_model
    from attnviz.engine.reading.config import read_config
    from attnviz.engine.reading.gguf_file import gguf_config, open_gguf
    from gguf_files import gguf_tensors, write_gguf
    from tiny import FIXTURES

    cfg, tensors = gguf_tensors(FIXTURES / "llama_gqa")
    want = read_config(FIXTURES / "llama_gqa")
    got = gguf_config(open_gguf(write_gguf(tmp_path / "m.gguf", cfg, tensors)))
    for f in dataclasses.fields(want):
        if f.name == "raw":
            continue
        a, b = getattr(got, f.name), getattr(want, f.name)
        assert a == b or a == pytest.approx(b, rel=1e-6), f.name  # (eps stored as float32)
    for field, value, key in (("num_key_value_heads", 3, "llama.attention.head_count_kv"),
                              ("rms_norm_eps", -1.0, "llama.attention.layer_norm_rms_epsilon")):
        path = write_gguf(tmp_path / f"{field}.gguf", {**cfg, field: value}, tensors)
        with pytest.raises(ModelLoadError, match=f"sets {key} to {value},"):
            load_model(path)
