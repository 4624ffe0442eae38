"""`attnviz export`: write a figure (PNG/SVG, rendered offscreen) or the numbers (NPY/CSV/JSON) of
one head, one layer or all layers, with no display needed."""

from __future__ import annotations

import argparse
import os
from contextlib import contextmanager

from attnviz.engine.reading.token_text import tokens
from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import add_model, check_out, non_negative, prediction_head, refuse_options, show_notice
from attnviz.engine import DEFAULT_TEXT, load_model
from attnviz.engine.analysing.predict import ALT_RULE, TOKEN_RULE
from attnviz.engine.computing.checkpoints import checkpoint_record
from attnviz.engine.errors import InputError
from attnviz.engine.computing.patterns import DEFAULT_SCALE, SCALE_MODES, check_index
from attnviz.figures.data import DEFAULT_COLORMAP, DEFAULT_WIDTH, MAX_WIDTH, MIN_WIDTH  # (no Qt: --help stays quick)
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.registry import opened_path

OUT_SUFFIXES = (".png", ".svg", ".npy", ".csv", ".json")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export", help="export a head, a layer or all layers as PNG/SVG/NPY/CSV/JSON",
        description="With --layer and --head: one head; with --layer: that layer's heads; "
                    "with neither: all layers. Images get a .json sidecar next to them.")
    add_model(p, "--view prediction, lens and dla need a causal language model")
    p.add_argument("--text", default=DEFAULT_TEXT, help="text to run (default: %(default)r)")
    p.add_argument("--layer", type=non_negative, metavar="N", help="layer index (0-based)")
    p.add_argument("--head", type=non_negative, metavar="N", help="head index (0-based); needs --layer")
    p.add_argument("--width", type=int, metavar="PX",
                   help=f"image width in pixels, {MIN_WIDTH}..{MAX_WIDTH} (default: {DEFAULT_WIDTH}); images only")
    p.add_argument("--colormap", help="pyqtgraph colormap name (default: viridis); images only")
    p.add_argument("--scale", choices=SCALE_MODES,
                   help="shared (the default): 0 .. the run's largest weight, every layer and head "
                        "(the window's Shared scale); per-head: 0 .. each head's own; images only")
    p.add_argument("--hide-first", action="store_true",
                   help="hide the first-token column and renormalise each row")
    p.add_argument("--value-weighted", action="store_true",
                   help="export each weight times ||v_key W_O(head)|| (what the key sends through "
                        "the head), rows renormalised: the window's Value-weighted view")
    p.add_argument("--truncate", action="store_true", help="cut text longer than the model's positions")
    p.add_argument("--out", required=True, help="output file: .png, .svg, .npy, .csv or .json")
    p.add_argument("--view", choices=("heatmap", "anatomy", "prediction", "lens", "dla"), default="heatmap",
                   help="heatmap (default): the attention patterns; anatomy: layer --layer (default "
                        "0) drawn as the pipeline x -> W_Q/W_K/W_V -> heads -> concat -> W_O with "
                        "its real weights and costs, head --head lit (.png or .svg); prediction, "
                        "lens, dla: the window's What heads do views at --position (any format)")
    p.add_argument("--position", type=int, metavar="P",
                   help="prediction, lens, dla: the query token (default: the last; negative from the end)")
    p.add_argument("--target", help=f"prediction, lens, dla: the target token, {TOKEN_RULE} (default: "
                                    "the clean run's top-1)")
    p.add_argument("--alt", help=f"dla: the alternative token, typed as --target is (default: {ALT_RULE})")
    p.add_argument("--ablate", metavar="HEAD[,HEAD...]",
                   help="prediction, lens, dla: switch these heads off first (e.g. 3.1 or 'L3 H1')")
    p.add_argument("--ablate-mode", choices=("zero", "mean"),
                   help="prediction, lens, dla: replace the switched-off heads' outputs by zero "
                        "(the default) or by their mean over the text's positions in the clean run")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from attnviz.figures.data import IMAGE_FORMATS, format_of, make_view, write_numbers

    if args.head is not None and args.layer is None:
        raise InputError("--head needs --layer (which layer's head?)")
    scope = "all" if args.layer is None else ("layer" if args.head is None else "head")
    check_out(args.out, OUT_SUFFIXES)
    fmt = format_of(args.out)
    if getattr(args, "view", "heatmap") == "anatomy":
        return _export_anatomy(args, fmt)
    if getattr(args, "view", "heatmap") in ("prediction", "lens", "dla"):
        return _export_effects(args, fmt)
    refuse_options(_effects_options(args), "only to --view prediction, lens and dla, not to heatmaps")
    if fmt in IMAGE_FORMATS:  # image options checked before the model loads
        width, colormap = _image_options(args)
    else:
        refuse_options((("--width", args.width is not None), ("--colormap", args.colormap is not None),
                        ("--scale", args.scale is not None)), f"only to .png and .svg images, not .{fmt}")
        width, colormap = DEFAULT_WIDTH, DEFAULT_COLORMAP
    model = _model(args, args.layer)
    result = model.run(args.text,
                       request=RunRequest(truncate=args.truncate, values=args.value_weighted))
    show_notice("export", result)
    view = make_view(result, model=model.name, scope=scope, layer=args.layer or 0, head=args.head,
                     colormap=colormap, scale_mode=args.scale or DEFAULT_SCALE,
                     hide_first=args.hide_first, checkpoint=checkpoint_record(model),
                     value_weighted=args.value_weighted, layer_kinds=model.config.layer_kinds())
    if fmt in IMAGE_FORMATS:
        with offscreen():
            from attnviz.figures.write import export_view

            written = export_view(view, args.out, fmt=fmt, width=width,
                                  model_path=opened_path(args.model))
    else:  # numbers need no Qt at all
        written = write_numbers(view, args.out, fmt)
    shape = "x".join(str(n) for n in view.selected().shape)
    print(f"{written[0]}: {scope} of {model.name}{checkpoint_opt.describe(model)}, "
          f"{tokens(result.n_tokens)}, weights [{shape}]"
          + (f" (+ sidecar {written[1].name})" if len(written) > 1 else ""))
    return 0


def _effects_options(args) -> tuple:
    """(flag, given) of the options that only the What heads do views read."""
    return (("--position", args.position is not None), ("--target", args.target is not None),
            ("--alt", args.alt is not None), ("--ablate", args.ablate is not None),
            ("--ablate-mode", args.ablate_mode is not None))


def _image_options(args) -> tuple[int, str]:
    """(width, colormap) of an image export, --width and --colormap checked before the model loads."""
    from attnviz.figures.style import heat_table

    width = DEFAULT_WIDTH if args.width is None else args.width
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise InputError(f"--width {width} is outside {MIN_WIDTH}..{MAX_WIDTH} pixels")
    colormap = DEFAULT_COLORMAP if args.colormap is None else args.colormap  # '' is a name, refused
    heat_table(colormap)  # an unknown name raises ExportError with the known ones
    return width, colormap


@contextmanager
def offscreen():
    """Qt for rendering, with no display: the offscreen platform draws into memory. The
    QGuiApplication (the one running, or a new one) is kept for the block."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    yield QGuiApplication.instance() or QGuiApplication(["attnviz-export"])


def _model(args, layer, eager: bool = True):
    """The model (at --checkpoint), with --layer and --head checked against it. `eager=False`: a
    GGUF file's layers are expanded as the run reaches them (engine load_model)."""
    model = checkpoint_opt.at(load_model(args.model, eager=eager), args)
    cfg = model.config
    if layer is not None:
        check_index("layer", layer, cfg.n_layer, model.name)
    if args.head is not None:
        check_index("head", args.head, cfg.n_head, model.name, " per layer")
    return model


def _export_anatomy(args, fmt: str) -> int:
    """`--view anatomy`: one layer's pipeline as PNG or SVG, through the heatmaps' writer."""
    from attnviz.figures.data import IMAGE_FORMATS

    if fmt not in IMAGE_FORMATS:
        raise InputError(f"--view anatomy writes a .png or .svg image, not .{fmt}")
    refuse_options((("--scale", args.scale is not None), ("--hide-first", args.hide_first),
                    ("--value-weighted", args.value_weighted)), "to heatmaps, not to --view anatomy")
    refuse_options(_effects_options(args), "only to --view prediction, lens and dla, not to --view anatomy")
    width, colormap = _image_options(args)
    layer = args.layer or 0
    model = _model(args, layer, eager=False)  # the layers after `layer` are never read
    result = model.run(args.text,
                       request=RunRequest(truncate=args.truncate, inputs=True, layers=layer + 1))
    show_notice("export", result)
    with offscreen():
        from attnviz.figures.anatomy import make_anatomy_view
        from attnviz.figures.write import export_view

        view = make_anatomy_view(model, result, layer, args.head, colormap)
        written = export_view(view, args.out, fmt=fmt, width=width, model_path=opened_path(args.model))
    lit = f", head {args.head} lit" if args.head is not None else ""
    print(f"{written[0]}: anatomy of layer {layer}{lit}, {model.name}{checkpoint_opt.describe(model)}, "
          f"{tokens(result.n_tokens)} "
          f"(+ sidecar {written[1].name})")
    return 0


def _export_effects(args, fmt: str) -> int:
    """`--view prediction|lens|dla`: the What heads do views, as the window exports them."""
    from attnviz.engine.analysing.ablation import parse_heads
    from attnviz.engine.analysing.effects import Ablation, analyse, window_run
    from attnviz.figures.data import IMAGE_FORMATS

    refuse_options((("--scale", args.scale is not None), ("--hide-first", args.hide_first),
                    ("--value-weighted", args.value_weighted), ("--layer", args.layer is not None),
                    ("--head", args.head is not None)), f"to heatmaps, not to --view {args.view}")
    width = _image_options(args)[0] if fmt in IMAGE_FORMATS else DEFAULT_WIDTH
    model = checkpoint_opt.at(load_model(args.model), args)
    prediction_head(model, f"export --view {args.view}")  # before running anything
    cfg = model.config
    target, alt = args.target or "", args.alt or ""
    heads = parse_heads(args.ablate, cfg.n_layer, cfg.n_head) if (args.ablate or "").strip() else []
    run = window_run(model, args.text, request=RunRequest(truncate=args.truncate),
                     ablation=Ablation(tuple(heads), args.ablate_mode or "zero"))
    show_notice("export", run.result)
    analysis = analyse(model, run, args.position, target, alt)
    with offscreen():
        from attnviz.figures.effects import effects_view
        from attnviz.figures.write import export_view

        view = effects_view(args.view, analysis, model=model.name, result=run.result,
                            kv_group=model.kv_group, typed=(target, alt),
                            checkpoint=checkpoint_record(model))
        written = export_view(view, args.out, fmt=fmt, width=width, model_path=opened_path(args.model))
    changed = f", {analysis.ablation.describe()}" if analysis.changed is not None else ""
    print(f"{written[0]}: {args.view} after token {analysis.position} of "
          f"{model.name}{checkpoint_opt.describe(model)}{changed}"
          + (f" (+ sidecar {written[1].name})" if len(written) > 1 else ""))
    return 0
