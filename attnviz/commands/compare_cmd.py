"""`attnviz compare`: two models on the same tokens, head by head (engine/analysing/compare.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.commands import checkpoint_opt
from attnviz.engine.reading.token_text import quoted
from attnviz.commands.checks import check_out, fraction, parse_ids, refuse_options, show_notice
from attnviz.engine import WINDOW_MODEL, load_model
from attnviz.engine.analysing import compare as C
from attnviz.engine.analysing.pair import (
    check_same_shape,
    check_same_vocab,
    models_pair,
)
from attnviz.engine.analysing.pair_memory import load_second
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.errors import InputError
from attnviz.engine.computing.checkpoints import checkpoint_record, model_at
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.json_text import dumps as strict_json

OUT_SUFFIXES = (".csv", ".json", ".png")
MOVED = 10  # heads listed in the plain report


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="two models on the same tokens: which heads moved, and what the prediction lost",
        description="Runs model A and model B (another file or store model, another training "
                    "checkpoint, or A quantized in memory) on the same token ids and reports each "
                    "head's attention JSD (bits), the residual streams' cosine per layer, the "
                    "next-token KL(A||B) (nats) per position, the top-1 flips, and the induction "
                    "heads lost on the repeated-random probe. Both models need one vocabulary and "
                    "one shape. Definitions: docs/compare.md.")
    p.add_argument("--model", default=WINDOW_MODEL, help="model A: name, folder or .gguf (default: "
                   "%(default)s)")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--against", metavar="B", help="model B: name, folder or .gguf")
    b.add_argument("--quantize", metavar="TYPE",
                   help="model B is A quantized in memory to TYPE (Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, F16, BF16)")
    p.add_argument("--against-checkpoint", type=checkpoint_opt.checkpoint_index, metavar="J",
                   help="model B's training checkpoint (of --against, or of A's model without it)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="text to run (model A's special tokens are added)")
    src.add_argument("--ids", help="comma-separated token ids, run as given (no special tokens)")
    src.add_argument("--probe", action="store_true",
                     help="the repeated-random probe (as `attnviz heads --probe`)")
    p.add_argument("--truncate", action="store_true",
                   help="cut --text or --ids longer than the model's positions (as the window's "
                        "Compare tab runs its text)")
    p.add_argument("--threshold", type=fraction, default=C.INDUCTION_THRESHOLD, metavar="S",
                   help="induction strength (0 < S <= 1) a head needs in A to count, and to survive "
                        "in B (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a report")
    p.add_argument("--out", metavar="FILE", help="also write the JSD map: .csv (layer, head, jsd, "
                   "jsd_max), .json (the whole document) or .png (the layers x heads map)")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_compare)


def load_b(a, args):
    """(model B, its identity) from --against / --quantize / --against-checkpoint."""
    if args.quantize is not None:
        refuse_options((("--against-checkpoint", args.against_checkpoint is not None),),
                       "only with --against, or alone (a checkpoint of A's model)")
        qtype = args.quantize.upper()

        def load(budget):
            from attnviz.engine.computing.quantized import quantized_model

            return quantized_model(a, qtype)
        b = load_second(load, a, f"{a.name} quantized to {qtype}")
        return b, C.identity(a, f"{side_name(a)} quantized to {qtype}", quantized=qtype,
                             checkpoint=checkpoint_record(a))
    if args.against is None:
        if args.against_checkpoint is None:
            raise InputError("give model B: --against B, --quantize TYPE, or --against-checkpoint J")
        b = load_second(lambda budget: model_at(load_model(args.model, budget=budget), args.against_checkpoint),
                        a, f"model B ({args.model} at checkpoint {args.against_checkpoint})")
    else:
        b = load_second(lambda budget: model_at(load_model(args.against, budget=budget), args.against_checkpoint),
                        a, f"model B ({args.against})")
    return b, C.identity(b, side_name(b), checkpoint=checkpoint_record(b))


def side_name(model) -> str:
    return model.name + checkpoint_opt.describe(model)


def source_ids(a, args) -> tuple[list[int], list[str], list[str]]:
    """(ids [T], their tokens, their labels) from --text, --ids or --probe, as model A reads them."""
    request = RunRequest(use_cache=False, layers=1, truncate=args.truncate)
    if args.probe:
        ids = C.induction_probe(a)
        result = a.run(ids=ids, request=request)
    elif args.ids is not None:
        result = a.run(ids=parse_ids(args.ids), request=request)
    else:
        result = a.run(args.text, request=request)
    show_notice(args.command, result)
    return result.input_ids.tolist(), list(result.tokens), list(result.labels)


def compare_report(a, b, ids, tokens, a_id, b_id, threshold=C.INDUCTION_THRESHOLD, probe_run=False) -> dict:
    """The `compare` JSON document: tokens, input_ids, a, b, then every metric (compare.compare)."""
    pair = models_pair(a, b, ids, C.compare_trace)
    probe = pair if probe_run else C.probe_pair(a, b)
    return {"tokens": tokens, "input_ids": [int(i) for i in ids], "a": a_id, "b": b_id,
            **C.compare(pair, probe, threshold)}


def cmd_compare(args) -> int:
    if args.probe and args.truncate:
        raise InputError("--truncate applies to --text and --ids (the probe is always cut to fit)")
    if args.ids is not None:
        parse_ids(args.ids)  # checked before loading
    out = check_out(args.out, OUT_SUFFIXES) if args.out else None
    a = checkpoint_opt.at(load_model(args.model), args)
    b, b_id = load_b(a, args)
    check_same_shape(a, b)
    check_same_vocab(a, b)
    ids, tokens, labels = source_ids(a, args)
    doc = compare_report(a, b, ids, tokens, C.identity(a, side_name(a), checkpoint=checkpoint_record(a)),
                         b_id, args.threshold, probe_run=args.probe)
    # the tokens as the window labels them (the tables' spelling), beside the raw pieces
    doc = {"tokens": doc["tokens"], "labels": labels, **doc}
    if out is not None:
        write_out(out, doc, a)
    if args.json:
        print(strict_json(doc))
    else:
        print_report(doc)
    return 0


def write_out(out: Path, doc: dict, a) -> None:
    """The JSD map to `out` (.csv, .json, .png), all or nothing (figures/data.write_atomic)."""
    from attnviz.figures.data import write_atomic

    fmt = out.suffix.lower()
    if fmt == ".json":
        data = (strict_json(doc) + "\n").encode("utf-8")
    elif fmt == ".csv":
        from attnviz.figures.compare_csv import csv_text  # (no Qt: a text export)

        data = csv_text(doc["heads_jsd"], doc["heads_jsd_max"]).encode("utf-8")
    else:
        from attnviz.commands.export_cmd import offscreen
        from attnviz.figures import compare as F

        with offscreen():
            data = F.png_bytes(F.jsd_map(doc["heads_jsd"], doc["a"]["name"], doc["b"]["name"], a.kv_group))
    write_atomic([(out, data)])


def print_report(doc: dict) -> None:
    for side in ("a", "b"):
        d = doc[side]
        files = ", ".join(f"{Path(f['file']).name} sha256 {f['sha256'][:12]}" for f in d["files"])
        print(f"{side.upper()}: {d['name']}" + (f" ({files})" if files else ""))
    labels = doc.get("labels", doc["tokens"])
    print(f"{tokens(len(doc['tokens']))}: {' '.join(map(quoted, labels[:24]))}"
          + (" ..." if len(doc["tokens"]) > 24 else ""))
    jsd, top = np.array(doc["heads_jsd"]), np.array(doc["heads_jsd_max"])
    moved = C.moved_most(jsd, MOVED)
    print(f"attention JSD (bits), mean over heads {jsd.mean():.3g}; " + (
        f"the {plural(len(moved), 'head')} that moved most (mean over query rows, largest row):" if moved
        else "no head moved: every head's JSD is exactly 0"))
    for l, h, v in moved:
        print(f"  {head_title(l, h):<9} {v:<10.3g} max {top[l, h]:.3g}")
    print(C.resid_drift(doc["resid_cos"]))  # (the Compare panel's words)
    if doc["kld_stats"] is None:
        print("next-token KL, same top-1, flips: none (model A predicts no next token)")
    else:
        s = doc["kld_stats"]
        T = len(doc["tokens"])
        print(f"next-token KL(A||B), nats: mean {s['mean']:.3g}  median {s['median']:.3g}  "
              f"p99 {s['p99']:.3g}  max {s['max']:.3g}")
        same = round(doc["same_top1"] * T)
        print(f"same top-1: {doc['same_top1']:.1%} ({same} of {T} positions)")
        for f in doc["flips"][:MOVED]:
            print(f"  flip after token {f['position']} {quoted(labels[f['position']])}: "
                  f"A {quoted(f['a_token'])} (#{f['a_id']}), B {quoted(f['b_token'])} (#{f['b_id']})")
        if len(doc["flips"]) > MOVED:
            print(f"  ... and {len(doc['flips']) - MOVED} more flips (--json lists them all)")
    ind = doc["induction"]
    a, b = np.array(ind["a"]), np.array(ind["b"])
    n_strong = len(ind["survived"]) + len(ind["lost"])
    print(f"induction heads on the probe (strength >= {ind['threshold']:g} in A): {n_strong}; "
          f"lost in B: {len(ind['lost'])}")
    for l, h in ind["lost"]:
        t = ind["threshold"]
        print(f"  lost {head_title(l, h):<9} {C.beside_threshold(a[l, h], t, 3)} -> "
              f"{C.beside_threshold(b[l, h], t, 3)}")
