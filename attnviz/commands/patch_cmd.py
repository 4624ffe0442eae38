"""`attnviz patch`: activation patching between a clean and a corrupted text of one length."""

from __future__ import annotations

import argparse
import sys


from attnviz.commands import checkpoint_opt
from attnviz.engine.reading.token_text import plural, quoted
from attnviz.commands.checks import add_model, parse_ids, prediction_head
from attnviz.engine import load_model
from attnviz.engine.analysing import patching as PT
from attnviz.engine.analysing.predict import TOKEN_RULE, vocab_token
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.errors import InputError
from attnviz.engine.reading.json_text import dumps as strict_json

TOP = 10  # rows of the table of largest effects


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "patch", help="activation patching: which layer, position or head carries the answer",
        description="Runs the corrupted text and puts back one piece of the clean run at a time "
                    "(denoise; --direction noise: the reverse), measuring at --position "
                    "diff = logit(target) - logit(alt) and effect = (diff_patched - diff_corrupt) "
                    "/ (diff_clean - diff_corrupt): denoising, 1 the clean answer fully back and "
                    "0 no change; noising, 1 no change and 0 the corrupted answer fully in. "
                    "The two texts must give the same number of tokens.")
    add_model(p, "a causal language model: patching measures its prediction")
    clean = p.add_mutually_exclusive_group(required=True)
    clean.add_argument("--clean", metavar="TEXT", help="the clean text (the model's special tokens are added)")
    clean.add_argument("--ids-clean", metavar="IDS", help="the clean text as comma-separated token ids")
    corrupt = p.add_mutually_exclusive_group(required=True)
    corrupt.add_argument("--corrupt", metavar="TEXT", help="the corrupted text, of the same token count")
    corrupt.add_argument("--ids-corrupt", metavar="IDS", help="the corrupted text as token ids")
    p.add_argument("--what", choices=PT.WHATS, required=True,
                   help="resid: the residual entering each layer, per position; head_out: each "
                        "head's output at every position; head_out_by_pos: per position; "
                        "head_pattern: each head's attention weights; mlp_out: each MLP's output, "
                        "per position")
    p.add_argument("--position", type=int, metavar="P",
                   help="token index the metric reads (negative: from the end; default: the last)")
    p.add_argument("--target", metavar="TOKEN",
                   help=f"{TOKEN_RULE} (default: the clean run's top-1)")
    p.add_argument("--alt", metavar="TOKEN",
                   help="the other token, typed as --target is (default: the corrupted run's top-1, "
                        "or its second when that is the target)")
    p.add_argument("--direction", choices=PT.DIRECTIONS, default="denoise",
                   help="denoise: the corrupted run with clean pieces (default); noise: the clean "
                        "run with corrupted pieces")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_patch)


def _side(model, label: str, text, ids, flag: str):
    """(ids, tokens, labels) of one side, tokenised once, the labels as the window and the Patching
    panel show them (Model.prepare's: a space as ·), or InputError naming it."""
    try:
        prep = model.prepare(text) if ids is None else model.prepare(ids=parse_ids(ids, flag))
    except InputError as exc:
        raise InputError(f"the {label} text: {exc}") from None
    if prep.notice:
        print(f"attnviz patch: note: the {label} text: {prep.notice}", file=sys.stderr)
    return prep.ids, list(prep.tokens), list(prep.labels)


def patch_report(model, result: PT.Patching, tokens_clean, tokens_corrupt) -> dict:
    """The `patch --json` document."""
    m = result.metric
    return {"model": model.name, "tokens_clean": list(tokens_clean),
            "tokens_corrupt": list(tokens_corrupt), "position": m.position, "target": m.target,
            "alt": m.alt, "diff_clean": m.diff_clean, "diff_corrupt": m.diff_corrupt,
            "direction": result.direction, "what": result.what, "effect": result.effect.tolist(),
            "seconds": result.seconds, **({"note": result.note} if result.note else {}),
            **checkpoint_opt.entry(model)}


def describe_index(what: str, index: tuple, tokens_clean, tokens_corrupt) -> str:
    """Where one effect was measured: "L3 H1", "L3 at 5 ' John'", "L3 H1 at 5 ' John'/' Mary'"
    (a position's clean token, and its corrupted one where they differ)."""
    if what in ("head_out", "head_pattern"):
        return head_title(*index)

    def at(t):
        a, b = tokens_clean[t], tokens_corrupt[t]
        return f"at {t} {quoted(a)}" + (f"/{quoted(b)}" if a != b else "")
    if what == "head_out_by_pos":
        layer, t, h = index
        return f"{head_title(layer, h)} {at(t)}"
    layer, t = index
    return f"{'MLP ' if what == 'mlp_out' else ''}L{layer} {at(t)}"


def cmd_patch(args) -> int:
    for flag, value in (("--ids-clean", args.ids_clean), ("--ids-corrupt", args.ids_corrupt)):
        if value is not None:
            parse_ids(value, flag)  # checked before loading
    model = checkpoint_opt.at(load_model(args.model), args)
    prediction_head(model, "patch")  # refuses a model that cannot predict, before running anything
    ids_clean, tokens_clean, clean = _side(model, "clean", args.clean, args.ids_clean, "--ids-clean")
    ids_corrupt, tokens_corrupt, corrupt = _side(model, "corrupted", args.corrupt, args.ids_corrupt,
                                                 "--ids-corrupt")
    PT.check_ids(ids_clean, ids_corrupt)
    target = vocab_token(model, args.target) if args.target is not None else None
    alt = vocab_token(model, args.alt) if args.alt is not None else None
    progress = _progress if sys.stderr.isatty() and not args.json else None
    result = PT.patch(model, ids_clean, ids_corrupt, args.what, args.position, target, alt,
                      args.direction, progress=progress)
    doc = patch_report(model, result, tokens_clean, tokens_corrupt)
    if args.json:
        print(strict_json(doc))
        return 0
    from attnviz.figures.numbers import plain_signed  # (here: the command loads figures only to print)

    m = result.metric
    # the tables show tokens as the window and the Patching panel label them (clean, corrupt); the
    # raw pieces are in --json
    print(f"{model.name}{checkpoint_opt.describe(model)}: {args.what}, {args.direction}, {plural(result.runs, 'patched run')} in "
          f"{result.seconds['total']:.1f} s; at token {m.position} {quoted(clean[m.position])}")
    print(f"diff = logit({m.target} {quoted(token_text(model, m.target))}) - logit({m.alt} "
          f"{quoted(token_text(model, m.alt))}): clean {plain_signed(m.diff_clean, 3)}, corrupted "
          f"{plain_signed(m.diff_corrupt, 3)}")
    base = PT.unpatched(result.direction)
    if result.note:
        print(f"note: {result.note}")
    print(f"effect = (diff_patched - diff_corrupt) / (diff_clean - diff_corrupt), {base:g} where "
          f"nothing changes; largest |effect{' - 1' if base else ''}|:")
    for index, e in PT.ranked(result, TOP):
        print(f"  {describe_index(args.what, index, clean, corrupt):<32} {plain_signed(e, 3)}")
    return 0


def _progress(done: int, total: int) -> None:
    print(f"\rpatching: {done}/{total} runs", end="\n" if done == total else "",
          file=sys.stderr, flush=True)
