"""One home for each shared constant: the others import it, none keeps its own copy."""

import re
from pathlib import Path
from attnviz.engine.computing.request import RunRequest

PACKAGE = Path(__file__).resolve().parents[1] / "attnviz"


def definitions(name: str) -> list[str]:
    """Modules that assign `name` at the top level."""
    return sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                  if re.search(rf"^{name}\s*=", p.read_text(encoding="utf-8"), flags=re.M))


def test_each_shared_constant_has_one_home():
    assert definitions("SCALE_MODES") == ["engine/computing/patterns.py"]
    assert definitions("DEFAULT_MODEL") == ["engine/reading/registry.py"]  # the CLI's; the window's is WINDOW_MODEL
    assert definitions("DEFAULT_TEXT") == ["engine/reading/registry.py"]
    assert definitions("COLORMAPS") == ["figures/data.py"]
    assert definitions("DEFAULT_COLORMAP") == ["figures/data.py"]
    widths = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                    if re.search(r"^(DEFAULT_WIDTH|MIN_WIDTH)\b.*=", p.read_text(encoding="utf-8"), flags=re.M))
    assert widths == ["figures/data.py"]  # every export's sizes, the command line's --help included
    spelled = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if '"viridis"' in p.read_text(encoding="utf-8"))
    assert spelled == ["figures/data.py"]  # everything else says DEFAULT_COLORMAP


def test_the_users_see_the_same_tuple():
    from attnviz.cli import build_parser
    from attnviz.engine.computing import patterns
    from attnviz.figures import data as export_data
    from attnviz.ui.machinery import state

    assert state.SCALE_MODES is patterns.SCALE_MODES is export_data.SCALE_MODES
    export = build_parser()._subparsers._group_actions[0].choices["export"]
    scale = next(a for a in export._actions if a.dest == "scale")
    assert tuple(scale.choices) == patterns.SCALE_MODES


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

    sampled = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if "getLookupTable(" in p.read_text(encoding="utf-8"))
    assert sampled == ["figures/style.py"]
    lut = heat_table("magma")
    assert lut.shape == (256, 4) and lut[0, 3] == 0 and (lut[1:, 3] == 255).all()
    np.testing.assert_array_equal(lut[1:, :3], colormap_colors("magma", 255))
    w = np.random.default_rng(0).random((3, 5, 5), dtype=np.float32)
    dest = np.zeros(w.shape, np.uint8)
    dest[...] = heat_positions(w, w.max())  # the window's path: positions truncated into its mosaic
    np.testing.assert_array_equal(dest, heat_index(w, w.max()))
    assert dest.min() >= 1 and heat_index(np.float32(w.max()), w.max()) == 255
    # nothing else scales weights onto a colour table by hand
    by_hand = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                     if any(s in p.read_text(encoding="utf-8") for s in ("* 256)", "254.0 /")))
    assert by_hand == []


def test_colours_and_head_titles_have_one_home():
    for name in ("GROUP_COLORS", "ROLE_COLORS", "ROLE_SHORT", "FOCUS", "BACKGROUND"):
        assert definitions(name) == ["figures/style.py"], name
    from attnviz.figures import style

    shared = {style.FOCUS, style.GOOD, style.WARNING, style.ERROR, style.ERROR_BACKGROUND, style.BACKGROUND,
              style.TEXT, *style.GROUP_COLORS, *style.ROLE_COLORS.values()}
    for p in PACKAGE.rglob("*.py"):
        if p.name != "style.py":
            text = p.read_text(encoding="utf-8").lower()
            assert not [c for c in shared if c.lower() in text], f"{p.name} spells out a colour of figures/style.py"
    titled = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                    if re.search(r"L\{[^}]+\} ?H\{", p.read_text(encoding="utf-8")))
    assert titled == ["engine/computing/patterns.py"]  # patterns.head_title; everything else calls it
    from attnviz.engine.computing.patterns import head_title

    assert head_title(3, 1) == "L3 H1"


def sources(*folders: str) -> dict[str, str]:
    """{module path under attnviz/: its text} for the modules of these folders."""
    return {str(p.relative_to(PACKAGE)): p.read_text(encoding="utf-8")
            for folder in folders for p in sorted((PACKAGE / folder).rglob("*.py"))}


def test_one_config_json_reader():
    """config.json is read by validate.read_json_object alone (one size cap, one set of messages):
    the engine's loader and `attnviz calc --config` both call it, and no other module of the engine
    or the commands parses JSON but for its own file."""
    from attnviz.commands import calc_cmd
    from attnviz.engine.reading import config, validate

    assert calc_cmd.read_json_object is config.read_json_object is validate.read_json_object
    parsing = sorted(name for name, text in sources("engine", "commands").items()
                     if re.search(r"\bjson\.loads?\(", text))
    assert parsing == [
        "engine/calc/presets.py",  # resources/presets.json
        "engine/reading/registry.py",  # a trained toy model's manifest
        "engine/reading/textbook.py",  # the textbook model's marker file
        "engine/reading/validate.py",  # config.json, shard indexes, checkpoint metadata, tokenizer.json
        "engine/reading/weights.py",  # a safetensors header (bytes, not a file)
    ]
    caps = sorted(name for name, text in sources("engine", "commands").items()
                  if re.search(r"^MAX_\w*(JSON|CONFIG)\w*\s*=", text, flags=re.M))
    assert caps == ["engine/reading/validate.py"]


def test_each_config_rule_has_one_home():
    """The rules the engine (config.py) and the calculator (calc/inputs.py) both apply to a config
    live in hf_config.py; the others call them and keep no copy."""
    texts = sources("engine", "commands")
    for rule in ("window_applies", "sliding_window", "default_d_ff", "default_d_head", "kv_heads_divide",
                 "attention_biases", "multi_query"):
        homes = sorted(n for n, t in texts.items() if re.search(rf"^def {rule}\(", t, flags=re.M))
        assert homes == ["engine/reading/hf_config.py"], (rule, homes)
    copies = {  # the rule written out again: a window of 0, the head divisions, the MLP width table
        "window == 0": r"window\S*\s*[!=]=\s*0\b",
        "n_head % n_kv_head": r"n_head\s*%|%\s*\S*n_kv_head\b",
        "d_model % n_head": r"d_model\s*%\s*\S*n_head\b",
        "D_FF_TIMES_D_MODEL": r"D_FF_TIMES_D_MODEL",
    }
    for what, pattern in copies.items():
        found = sorted(n for n, t in texts.items() if re.search(pattern, t))
        assert found == ["engine/reading/hf_config.py"], (what, found)
    for user in ("engine/reading/config.py", "engine/calc/inputs.py"):
        assert "kv_heads_divide(" in texts[user] and "default_d_head(" in texts[user], user
    assert "sliding_window(raw" in texts["engine/reading/config.py"] and "default_d_ff(" in texts["engine/reading/config.py"]

    from attnviz.engine.reading.hf_config import sliding_window

    assert [sliding_window({"sliding_window": w}, "mistral", False) for w in (None, 0, 16)] == [None, None, 16]
    assert sliding_window({"sliding_window": 16}, "qwen2", False) is None
    assert sliding_window({"sliding_window": 16}, "qwen2", True) == 16


def test_each_gguf_key_is_paired_with_its_config_field_once():
    """gguf_config builds its config dict from _GGUF_KEYS, the table its messages name keys by."""
    from attnviz.engine.reading.gguf_file import _GGUF_KEYS

    text = (PACKAGE / "engine" / "reading" / "gguf_file.py").read_text(encoding="utf-8")
    for field, key in _GGUF_KEYS.items():
        assert len(re.findall(rf'"{re.escape(key)}[".]', text)) == 1, key  # the table's, no meta("...")
        assert not re.search(rf'"{field}"\s*:\s*meta\(', text), field  # no hand-built {field: meta(key)}
