"""`attnviz predict` and `attnviz ablation-scan`: what the model predicts, which heads write it, and
what switching heads off does."""

from __future__ import annotations

import argparse
import sys

import numpy as np
from threadpoolctl import threadpool_limits

from attnviz.engine.reading.token_text import plural
from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import (
    add_model, blas_for, load_for_one_pass, parse_ids, positive, prediction_head, refuse_options,
    show_notice,
)
from attnviz.engine import load_model
from attnviz.engine.analysing import ablation as A, predict as P
from attnviz.engine.errors import InputError
from attnviz.engine.computing.longdoc import DenseTooLarge, LongTrace, check_dense
from attnviz.engine.parallel import cores
from attnviz.engine.computing.model import token_text
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.analysing.probes import probe_ids
from attnviz.engine.reading.token_text import quoted
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.json_text import dumps as strict_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict", help="the next-token prediction, its logit lens and each head's direct effect",
        description="The model's top next tokens after one token, the logit lens (raw: the final "
                    "norm applied to each layer), and the direct logit attribution of "
                    "logit(target) - logit(alt) to every head, MLP, the embeddings and the biases; "
                    "optionally with heads ablated or edges knocked out.")
    _source(p, probe=False)
    p.add_argument("--position", type=int, metavar="P",
                   help="token index to predict after (negative: from the end; default: the last)")
    p.add_argument("--top", type=positive, default=10, metavar="K", help="top tokens (default: 10)")
    p.add_argument("--target", metavar="TOKEN",
                   help=f"token for the DLA and the lens: {P.TOKEN_RULE} (default: the clean run's top-1)")
    p.add_argument("--alt", metavar="TOKEN",
                   help=f"the DLA's other token, typed as --target is (default: {P.ALT_RULE})")
    p.add_argument("--ablate", metavar="HEAD[,HEAD...]", help="heads to switch off, e.g. 3.1,5.0 or 'L3 H1,L5 H0'")
    p.add_argument("--ablate-mode", choices=A.MODES, default="zero",
                   help="replace the heads' outputs by zero or by their mean over this text's "
                        "positions in the clean run (default: zero)")
    p.add_argument("--knockout", metavar="L:Q-K[,...]",
                   help="edges to block (score -inf before the softmax): layer or layers a-b, "
                        "query Q, key K, e.g. 2:7-3 or 2-4:7-3; an edge is blocked in those of "
                        "the layers whose query sees it (a note on stderr names them)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser(
        "ablation-scan", help="zero-ablate every head in turn and rank heads by the loss they save",
        description="Zero-ablates every head alone and reports the increase in loss (nats): "
                    "--loss next is -log p(target) after --position; --loss repeat is the mean "
                    "-log p(token | prefix) over the second copy of a repeated sequence, after its "
                    "first token (the default for --probe, refused when the ids do not repeat).")
    _source(p, probe=True)
    p.add_argument("--loss", choices=A.LOSSES,
                   help="next (default for --text, --ids) or repeat (default for --probe)")
    p.add_argument("--position", type=int, metavar="P",
                   help="--loss next: token index to predict after (default: the last)")
    p.add_argument("--target", metavar="TOKEN",
                   help=f"--loss next: the token whose loss counts, {P.TOKEN_RULE} (default: the clean "
                        "top-1)")
    p.add_argument("--threads", type=positive, default=cores(), metavar="N",
                   help="a layer's heads run on N threads, one BLAS thread each (default: the "
                        f"cores, {cores()} here)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_scan)


def _source(p, probe: bool) -> None:
    add_model(p, "a causal language model")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="text to run (the model's special tokens are added)")
    src.add_argument("--ids", help="comma-separated token ids, run as given (no special tokens)")
    if probe:
        src.add_argument("--probe", action="store_true",
                         help="the random probe: a random token sequence repeated twice (as "
                              "`attnviz heads --probe`)")


def _run_prediction(model, args, prepared):
    """The run predict reads (z and the residual stream) of the `prepared` text; a text whose
    patterns would not fit at once runs as a long text, its attention in row blocks (the same z
    and residuals, no dense patterns). Edits need the whole run's patterns: refused there, with
    the sizes."""
    def long(prep):
        if args.ablate or args.knockout:
            try:
                check_dense(model.config, len(prep.ids))
            except DenseTooLarge as exc:
                raise InputError(exc.advice("--ablate and --knockout need every pattern at once: "
                                            "give a shorter text")) from None
        return model.run(prep, request=RunRequest(use_cache=False),
                         trace=LongTrace(z=True, resid=True))
    result = model.run(prepared, request=RunRequest(use_cache=False, long=long),
                       trace=P.prediction_trace())
    show_notice(args.command, result)
    return result


def predict_report(model, result, position, top, target, alt, edits=()) -> dict:
    """The `predict` JSON document for a run's trace (clean, or edited with `edits`)."""
    head = model.lm_head()
    clean = result.trace
    trace = A.run_edited(model, clean, edits, patterns=False) if edits else clean
    q = P.position_index(len(clean.ids), position)
    if edits:
        clean_pred = P.predict(head, clean, q, max(top, 2))
    else:  # the prediction and the lens from one pass over the unembedding
        clean_pred, lens = P.prediction_and_lens(head, clean, q, max(top, 2), target)
    target, alt = P.dla_tokens(clean_pred.top_ids, target, alt)
    pred = P.predict(head, trace, q, top) if edits else clean_pred
    dla = P.attribute(model, head, trace, q, target, alt)
    if edits:
        lens = P.logit_lens(head, trace, q, target)
    doc = {
        "model": model.name, "tokens": list(result.tokens), "labels": list(result.labels),
        "input_ids": result.input_ids.tolist(), "position": q,
        "top": [{"id": int(i), "token": token_text(model, i), "logprob": float(lp)}
                for i, lp in zip(pred.top_ids[:top], pred.top_logprobs[:top])],
        "target": target, "alt": alt, "target_token": token_text(model, target),
        "alt_token": token_text(model, alt), "logit_diff": dla.logit_diff,
        "dla": dla.heads.tolist(),
        "dla_rest": {"mlp": dla.mlp.tolist(), "embed": dla.embed, "bias": dla.bias},
        "lens": [{"top_id": int(i), "top_token": token_text(model, i), "target_logprob": float(t)}
                 for i, t in zip(lens.top_ids, lens.target_logprobs)],
        "target_logprob": float(pred.logprobs[target]), **checkpoint_opt.entry(model),
    }
    if edits:
        doc["changed"] = A.describe(edits)
        doc["clean_target_logprob"] = float(clean_pred.logprobs[target])
        doc["delta_target_logprob"] = float(pred.logprobs[target] - clean_pred.logprobs[target])
    return doc


def cmd_predict(args) -> int:
    if args.ids is not None:
        parse_ids(args.ids)  # checked before loading
    one_pass = not (args.ablate or args.knockout)  # (an edit reruns the layers from the first it changes)
    model = checkpoint_opt.at(load_for_one_pass(args.model, args.text) if one_pass
                              else load_model(args.model, text=args.text), args)
    prediction_head(model, args.command)  # refuses a model that cannot predict, before running anything
    ids = parse_ids(args.ids) if args.ids is not None else None
    prepared = model.prepare(None if ids is not None else args.text, ids=ids)  # tokenised once
    with blas_for(len(prepared.ids)):
        return _predict(model, args, prepared)


def _predict(model, args, prepared) -> int:
    result = _run_prediction(model, args, prepared)
    cfg = model.config
    target = P.vocab_token(model, args.target) if args.target is not None else None
    alt = P.vocab_token(model, args.alt) if args.alt is not None else None
    edits = []
    if args.ablate:
        edits += A.head_edits(result.trace, A.parse_heads(args.ablate, cfg.n_layer, cfg.n_head),
                              args.ablate_mode)
    elif args.ablate_mode != "zero":
        raise InputError("--ablate-mode applies only with --ablate")
    if args.knockout:
        knockouts = A.parse_knockouts(args.knockout, cfg.n_layer)
        edits += A.knockout_edits(cfg, result.n_tokens, knockouts)  # (refuses before any note)
        for note in A.knockout_notes(cfg, result.n_tokens, knockouts):  # narrowed, as the tab does
            print(f"attnviz {args.command}: note: {note}", file=sys.stderr)
    doc = predict_report(model, result, args.position, args.top, target, alt, edits)
    if args.json:
        print(strict_json(doc))
        return 0
    _print_prediction(doc, cfg, checkpoint_opt.describe(model))
    return 0


def _print_prediction(doc, cfg, step: str = "") -> None:
    """The table: tokens as the window labels them (token_text); the raw pieces are in --json."""
    from attnviz.figures.numbers import plain_signed  # (here: a predict alone loads no figure module)

    tok = doc["labels"][doc["position"]]
    target = f"{quoted(doc['target_token'])} ({doc['target']})"
    print(f"{doc['model']}{step}: after token {doc['position']} {quoted(tok)}"
          + (f" ({doc['changed']})" if "changed" in doc else ""))
    for row in doc["top"]:
        print(f"  {row['id']:>7}  {row['token']:<20} p = {np.exp(row['logprob']):.3f}  "
              f"log p = {row['logprob']:.3f}")
    if "changed" in doc:
        print(f"target {target}: log p {doc['clean_target_logprob']:.3f} clean, "
              f"{doc['target_logprob']:.3f} changed (delta {plain_signed(doc['delta_target_logprob'], 3)})")
    dla = np.array(doc["dla"])
    print(f"logit({target}) - logit({quoted(doc['alt_token'])} ({doc['alt']})) = "
          f"{doc['logit_diff']:.3f}; direct effect: "
          f"heads {plain_signed(dla.sum(), 3)}, MLPs {plain_signed(sum(doc['dla_rest']['mlp']), 3)}, embeddings "
          f"{plain_signed(doc['dla_rest']['embed'], 3)}, biases {plain_signed(doc['dla_rest']['bias'], 3)}")
    order = np.argsort(-np.abs(dla), axis=None)[:5]
    print("largest heads: " + ", ".join(f"{head_title(i // cfg.n_head, i % cfg.n_head)} {plain_signed(dla.flat[i], 3)}"
                                        for i in order))
    print("logit lens (raw: the final norm applied to each layer): top-1, log p(target)")
    for layer, row in enumerate(doc["lens"]):
        print(f"  {'L' + str(layer):<4} {row['top_token']:<20} {row['target_logprob']:8.3f}")


def cmd_scan(args) -> int:
    if args.ids is not None:
        parse_ids(args.ids)
    loss = args.loss or ("repeat" if args.probe else "next")
    if loss == "repeat":
        refuse_options((("--position", args.position is not None), ("--target", args.target is not None)),
                       "only with --loss next", sep=" and ")
    model = checkpoint_opt.at(load_model(args.model), args)
    head = prediction_head(model, args.command)
    if args.probe:
        ids = probe_ids(model)[0]
        tokens, labels = model.tokenizer.labels_for_ids(ids)
    else:
        ids = parse_ids(args.ids) if args.ids is not None else None
        result = model.run(args.text if ids is None else None, ids=ids, request=RunRequest(use_cache=False))
        show_notice(args.command, result)
        ids, tokens, labels = result.input_ids.tolist(), list(result.tokens), list(result.labels)
    target = P.vocab_token(model, args.target) if args.target is not None else None
    progress = _progress if sys.stderr.isatty() and not args.json else None
    with threadpool_limits(limits=1, user_api="blas"):  # the threads are the parallelism
        scan = A.ablation_scan(model, head, ids, loss, args.position, target, progress=progress,
                               threads=args.threads)
    doc = {"model": model.name, "tokens": tokens, "labels": labels, "input_ids": [int(i) for i in ids],
           "loss": loss,
           "baseline_loss": scan.baseline_loss, "effect": scan.effect.tolist(),
           "ranked": [{"layer": l, "head": h, "effect": e} for l, h, e in scan.ranked()],
           "position": scan.position, "target": scan.target,
           "repeat": None if scan.span is None else {"start": scan.span[0], "length": scan.span[1]},
           "seconds": scan.seconds, **checkpoint_opt.entry(model)}
    if args.json:
        print(strict_json(doc))
        return 0
    what = (f"-log p({quoted(token_text(model, scan.target))} ({scan.target})) after token "
            f"{scan.position} {quoted(labels[scan.position])}" if loss == "next" else
            f"mean -log p over the second copy ({plural(scan.span[1] - 1, 'token')})")
    print(f"{model.name}{checkpoint_opt.describe(model)}: loss {what} = {scan.baseline_loss:.3f} nats; "
          f"{plural(scan.effect.size, 'head')} zero-ablated one at a time in {scan.seconds['total']:.1f} s")
    from attnviz.figures.numbers import plain_signed  # (here: a predict alone loads no figure module)

    print("   rank  head      effect (nats)")
    for n, (l, h, e) in enumerate(scan.ranked()[:15], 1):
        print(f"  {n:>5}  {head_title(l, h):<9} {plain_signed(e)}")
    return 0


def _progress(done: int, total: int) -> None:
    print(f"\rablation scan: {done}/{plural(total, 'head')}", end="\n" if done == total else "",
          file=sys.stderr, flush=True)
