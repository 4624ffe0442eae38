"""`attnviz qk-attribution` and `attnviz circuits`: why a head attends where it does (one score
split into query-side x key-side parts of the residual stream), and the weight-space circuit scores
(OV copying, Q/K/V-composition, what a head writes for a token)."""

from __future__ import annotations

import argparse

import numpy as np

from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import add_model, non_negative, parse_ids, positive, show_notice
from attnviz.engine import load_model
from attnviz.engine.analysing import circuits as C, qk as Q
from attnviz.engine.analysing.predict import TOKEN_RULE, vocab_token
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.engine.errors import InputError
from attnviz.engine.computing.request import RunRequest
from attnviz.figures.numbers import plain_signed, score_text
from attnviz.engine.reading.json_text import dumps as strict_json

ROPE_NOTE = ("weight-space scores ignore RoPE (as TransformerLens' do); qk-attribution includes it")
OV_TOP = 10  # tokens ov_top lists unless --top says
ORDER = "composition[mode][earlier layer][earlier head][later layer][later head]"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "qk-attribution", help="why a head attends from one token to another: its score split into "
                               "query-side x key-side components",
        description="Splits head L.H's pre-softmax score from query position Q to key position K "
                    "into query-side x key-side components of the residual stream entering the "
                    "block (embed, each earlier head, e.g. L3H1, each earlier MLP, e.g. L3.mlp, bias), "
                    "through the input norm with its scale frozen from this run, W_Q / W_K, the "
                    "q/k norms and RoPE at the true positions. The table adds up to the score.")
    add_model(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="text to run (the model's special tokens are added)")
    src.add_argument("--ids", help="comma-separated token ids, run as given (no special tokens)")
    p.add_argument("--layer", type=non_negative, required=True, metavar="L")
    p.add_argument("--head", type=non_negative, required=True, metavar="H")
    p.add_argument("--query", type=non_negative, required=True, metavar="Q", help="query position")
    p.add_argument("--key", type=non_negative, required=True, metavar="K", help="key position")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_qk)

    p = sub.add_parser(
        "circuits", help="OV copying scores, Q/K/V-composition, and what a head writes for a token",
        description="Weight-space scores (no text), norm gains folded in as TransformerLens' "
                    "fold_ln does: copying [layer][head] = Re(sum of eigenvalues) / sum of |eigenvalues| "
                    "of W_E W_V W_O W_U; composition q, k, v [earlier layer][earlier head][later "
                    f"layer][later head]; with --head and --token, ov_top. For a model with RoPE: {ROPE_NOTE}.")
    add_model(p)
    p.add_argument("--head", metavar="HEAD", help="head for ov_top, e.g. 3.1 or 'L3 H1' (with --token)")
    p.add_argument("--token", metavar="TOK", help=f"source token for ov_top: {TOKEN_RULE}")
    p.add_argument("--top", type=positive, metavar="K",
                   help=f"ov_top length, with --head and --token (default: {OV_TOP})")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_circuits)


def qk_report(model, result, layer: int, head: int, query: int, key: int) -> dict:
    """The `qk-attribution` JSON document for a run whose trace kept z and the residual stream."""
    a = Q.qk_attribution(model, result.trace, layer, head, query, key)
    return {
        "model": model.name, "tokens": list(result.tokens), "labels": list(result.labels),
        "input_ids": result.input_ids.tolist(), "layer": layer, "head": head, "query": query, "key": key,
        "score": a.score, "components": list(a.components), "table": a.table.tolist(),
        "query_side": a.query_side.tolist(), "key_side": a.key_side.tolist(), "bias": a.bias,
        "top": [{"query": q, "key": k, "value": v} for q, k, v in a.top(Q.TOP)],
        **({"note": a.note} if a.note else {}), **checkpoint_opt.entry(model),
    }


def cmd_qk(args) -> int:
    ids = parse_ids(args.ids) if args.ids is not None else None  # checked before loading
    model = checkpoint_opt.at(load_model(args.model), args)
    cfg = model.config
    Q.check_cell(cfg, max(args.query, args.key) + 1, args.layer, args.head, args.query, args.key)
    trace = Q.qk_trace()
    result = model.run(args.text if ids is None else None, ids=ids, trace=trace,
                       request=RunRequest(use_cache=False))
    show_notice(args.command, result)
    doc = qk_report(model, result, args.layer, args.head, args.query, args.key)
    if args.json:
        print(strict_json(doc))
        return 0
    toks = doc["labels"]  # as the window labels them; the raw pieces are in --json
    print(f"{model.name}{checkpoint_opt.describe(model)}: {head_title(args.layer, args.head)}, query {args.query} "
          f"{quoted(toks[args.query])} -> key {args.key} {quoted(toks[args.key])}: score "
          f"{plain_signed(doc['score'])} (table sum "
          f"{plain_signed(float(np.sum(doc['table'])))}, bias terms {plain_signed(doc['bias'])})")
    if "note" in doc:
        print(f"note: {doc['note']}")
    print("largest query x key pairs:")
    for row in doc["top"][:10]:
        print(f"  {row['query']:>10} x {row['key']:<10} {plain_signed(row['value'])}")
    for side in ("query_side", "key_side"):
        vals = np.array(doc[side])
        order = np.argsort(-np.abs(vals))[:5]
        print(f"{side.replace('_', ' ')}: " + ", ".join(f"{doc['components'][i]} {plain_signed(vals[i], 3)}"
                                                        for i in order))
    return 0


def parse_head(text: str, n_layer: int, n_head: int) -> tuple[int, int]:
    """`"3.1"` or `"L3 H1"` -> (3, 1), within the model's layers and heads; InputError in one line
    otherwise."""
    from attnviz.engine.analysing.ablation import HEAD_FORMS, check_head, head_from_text

    lh = head_from_text(text)
    if lh is None:  # (the words the Ablation tab and --ablate use, after the option's name)
        raise InputError(f"--head: head {text!r} is not {HEAD_FORMS}")
    try:
        check_head(*lh, n_layer, n_head)
    except InputError as exc:
        raise InputError(f"--head: {exc}") from None
    return lh


def circuits_report(model, circ: C.Circuits, ov=None) -> dict:
    doc = {
        "model": model.name, "order": ORDER,
        "copying": C.copying_numbers(circ.copying),
        "composition": C.composition_numbers(circ.composition), **checkpoint_opt.entry(model),
    }
    if model.config.rope is not None:  # (a model without RoPE has nothing left out: no note, as the tab)
        doc["note"] = ROPE_NOTE
    if circ.copying is None:
        doc["no_copying"] = circ.no_copying
    elif np.isnan(circ.copying).any():
        doc["no_copying"] = f"null: {C.HEAD_ZERO_OV}"
    if any(C.undefined(circ.composition[mode])[0] for mode in C.MODES):
        doc["no_composition"] = f"null: {C.ZERO_COMPOSITION}"
    if ov is not None:
        doc["ov_top"] = [{"id": i, "token": t, "value": v} for i, t, v in ov]
        if not ov:
            doc["no_ov_top"] = C.WRITES_NOTHING
    return doc


def print_composition(composition: dict) -> None:
    """Each mode's strongest defined pairs (earlier layer -> later layer), and how many are n/a."""
    missing = False
    for mode in C.MODES:
        pairs = C.strongest(composition[mode], 5)
        bad, total = C.undefined(composition[mode])
        missing |= bad > 0
        print(f"{mode}-composition, strongest: " + (", ".join(
            f"{head_title(a, b)} -> {head_title(c, d)} {score_text(v)}" for a, b, c, d, v in pairs)
            or ("none (one layer: no head has an earlier head to read)" if not total else "none"))
              + (f" ({bad} of {total} pairs n/a)" if bad else ""))
    if missing:
        print(f"  n/a: {C.ZERO_COMPOSITION}")


def cmd_circuits(args) -> int:
    if (args.head is None) != (args.token is None):
        raise InputError("--head and --token go together: ov_top needs a head and a source token")
    if args.top is not None and args.head is None:  # (it sets nothing else: the tables are whole)
        raise InputError("--top sets the length of ov_top, which needs --head and --token")
    model = checkpoint_opt.at(load_model(args.model), args)
    cfg = model.config
    ov = token = None
    if args.head is not None:  # refusals (an encoder, a bad head or token) before the long part
        layer, head = parse_head(args.head, cfg.n_layer, cfg.n_head)
        token = vocab_token(model, args.token)
        ov = C.ov_top(model, layer, head, token, args.top or OV_TOP)
    circ = C.circuits(model)
    doc = circuits_report(model, circ, ov)
    if args.json:
        print(strict_json(doc))
        return 0
    name = model.name + checkpoint_opt.describe(model)
    print(f"{name}: {ROPE_NOTE}" if "note" in doc else name)
    if circ.copying is None:
        print(f"copying: none ({circ.no_copying})")
    else:
        print("copying [layer x head]:")
        for layer, row in enumerate(circ.copying):
            print(f"  L{layer:<3}" + " ".join("  n/a" if np.isnan(v) else plain_signed(v, 2) for v in row))
        if np.isnan(circ.copying).any():
            print(f"  n/a: {C.HEAD_ZERO_OV}")
    print_composition(circ.composition)
    if ov is not None:
        print(f"head {args.head} attending to {quoted(token_text(model, token))} ({token}) writes"
              + (": " + ", ".join(f"{quoted(t)} {plain_signed(v, 2)}" for _, t, v in ov) if ov
                 else f" no top tokens: {C.WRITES_NOTHING}"))
    return 0
