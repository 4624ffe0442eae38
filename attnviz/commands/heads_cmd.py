"""`attnviz heads` (role scores and labels of every head) and `attnviz find` (which heads send A to B)."""

from __future__ import annotations

import argparse
import textwrap

import numpy as np

from attnviz.engine.reading.token_text import plural, tokens
from attnviz.commands import checkpoint_opt
from attnviz.commands.checks import add_model, at_least, non_negative, positive, refuse_options, show_notice
from attnviz.engine import load_model
from attnviz.engine.analysing import find as F, heads as H, probes as P
from attnviz.engine.reading import textbook
from attnviz.engine.errors import InputError
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.token_text import quoted
from attnviz.engine.computing.request import RunRequest
from attnviz.engine.reading.json_text import dumps as strict_json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("heads", help="score every head's role (previous token, induction, ...)",
                       description="Score every head of a model on a text or on the repeated-random "
                                   "probe, label it with its strongest role, and print the "
                                   "definitions beside the numbers.")
    add_model(p)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--text", help="text to score (the model's special tokens are added)")
    p.add_argument("--truncate", action="store_true", help="cut text longer than the model's positions")
    src.add_argument("--probe", nargs="?", const="repeat", choices=PROBES, metavar="KIND",
                     help="score a probe instead of a text: repeat (the default: a random token "
                          "sequence repeated twice; duplicate and induction heads show up whatever "
                          "the text), syntactic (subject-verb agreement with an attractor noun) or "
                          f"coreference (pronoun -> antecedent), {P.N_ITEMS} template sentences each")
    p.add_argument("--probe-length", type=at_least(2), metavar="N",
                   help=f"random tokens before the repeat, at least 2 (default: {P.PROBE_LENGTH}; "
                        "cut to fit); --probe repeat only")
    p.add_argument("--seed", type=non_negative, metavar="N",
                   help=f"probe seed, >= 0 (default: {P.PROBE_SEED})")
    p.add_argument("--exclude-bos", action="store_true",
                   help="zero the first-token column before scoring (TransformerLens exclude_bos)")
    p.add_argument("--exclude-current", action="store_true",
                   help="zero the diagonal before scoring (TransformerLens exclude_current_token)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_heads)

    p = sub.add_parser("find", help="rank every head by the weight from one token to another",
                       description="Rank every head in every layer by the attention weight from "
                                   "the --from token (query) to the --to token (key).")
    add_model(p)
    p.add_argument("--text", required=True, help="text to run")
    p.add_argument("--truncate", action="store_true", help="cut text longer than the model's positions")
    p.add_argument("--from", dest="from_token", required=True, metavar="TOKEN",
                   help="query token, as shown (e.g. are), or TOKEN@POSITION when it occurs twice")
    p.add_argument("--to", dest="to_token", required=True, metavar="TOKEN",
                   help="key token, as shown (e.g. keys), or TOKEN@POSITION (e.g. the@4)")
    p.add_argument("--top", type=positive, metavar="N", help="print only the first N heads (default: all)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    checkpoint_opt.add(p)
    p.set_defaults(func=cmd_find)


# --probe KIND -> the probe; syntactic is the subject-verb agreement probe
PROBES = ("repeat", "syntactic", "agreement", "coreference")
TEMPLATE_KIND = {"syntactic": "agreement", "agreement": "agreement", "coreference": "coreference"}


def _fmt(v):
    return "   nan" if np.isnan(v) else f"{v:6.3f}"


CLI_PROBE = "the induction probe (--probe)"  # how this command scores it, for a text that repeats too little
UNDER_CHANCE = "*"  # a strength that clears its threshold while the score does not beat chance


def heads_table(hs):
    """The per-head table: for each role the number its label is tested on (strength, marked
    UNDER_CHANCE where it clears the threshold but the score does not beat chance by the margin),
    then mean distance and entropy. Headers say which number each column holds."""
    names = list(H.SCORE_NAMES)
    units = {**{r: "strength" for r in H.ROLES}, "distance": "tokens", "entropy": "bits"}
    legend = (
        "Role columns hold each role's strength (score / share of query rows with a pattern cell, "
        "capped at 1): the number a label is tested on. A head gets the role of its highest "
        "strength that clears the threshold ("
        + ", ".join(sorted({f"{t:g}" for t in H.THRESHOLDS.values()})) + f") with a score that beats "
        f"the head's chance score by {H.CHANCE_MARGIN:g}; '{UNDER_CHANCE}' marks a strength that "
        "clears the threshold while its score does not beat chance. Scores and chance scores: --json.")
    head_rows = [["layer", "head", "label", *names], ["", "", "", *(units[n] for n in names)]]
    rows = []
    for l in range(hs.n_layer):
        for h in range(hs.n_head):
            cells = [str(l), str(h), hs.labels[l][h]]
            for n in names:
                if n in H.ROLES:
                    v = float(hs.strength[n][l, h])
                    passes = H.passes(n, hs.strength[n], hs.scores[n], hs.chance.get(n))[l, h]
                    mark = UNDER_CHANCE if v >= H.THRESHOLDS[n] and not passes else " "
                    cells.append(f"{'nan' if np.isnan(v) else H.strength_text(n, v)}{mark}")
                else:
                    cells.append(f"{_fmt(hs.scores[n][l, h])} ")
            rows.append(cells)
    # each column as wide as its widest cell: a strength printed with more decimals (strength_text,
    # to stay on its side of the threshold) widens its column, never shifts its row
    widths = [max(len(row[i]) for row in head_rows + rows) for i in range(len(head_rows[0]))]
    lines = textwrap.wrap(legend, 100) + [""]
    for row in head_rows + rows:
        cells = [c.ljust(w) if i == 2 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))]
        lines.append(f"{cells[0]} {cells[1]}  {' '.join(cells[2:])}".rstrip())
    return lines


def heads_report(model, hs, source):
    """The `heads` JSON document."""
    doc = {"model": model.name, "n_layer": model.config.n_layer, "n_head": model.config.n_head,
           "causal": bool(model.config.causal), **source, **hs.to_json()}
    doc["best"] = {}
    for name in H.ROLES:  # the strongest head by the number labels are tested on (None: too few
        # rows, or the next token, which no head of a causal model can see)
        if (hs.rows.get(name) is not None and hs.rows[name] < H.MIN_ROWS) or (
                name == "next" and model.config.causal):
            doc["best"][name] = None
            continue
        l, h, strength = hs.best_strength(name)
        doc["best"][name] = {"layer": l, "head": h, "strength": strength,
                             "score": float(hs.scores[name][l, h]), "chance": float(hs.chance[name][l, h])}
    doc["no_head_clears"] = hs.unclaimed_roles()
    doc.update(checkpoint_opt.entry(model))
    if model.name == textbook.TEXTBOOK_NAME:
        doc["construction"] = [[textbook.describe_head(l, h) for h in range(model.config.n_head)]
                               for l in range(model.config.n_layer)]
    return doc


def cmd_heads(args) -> int:
    if args.probe and args.truncate:
        raise InputError("--truncate applies to --text (the probe is always cut to fit)")
    if args.probe in TEMPLATE_KIND:
        return _template_probe(args, TEMPLATE_KIND[args.probe])
    if not args.probe:
        refuse_options((("--probe-length", args.probe_length is not None),
                        ("--seed", args.seed is not None)), "only with --probe", sep=" and ")
    # (a GGUF vocabulary's tokenizer then holds only what the text can meet: the same tokens)
    model = checkpoint_opt.at(load_model(args.model, text=None if args.probe else args.text), args)
    if args.probe:
        seed = P.PROBE_SEED if args.seed is None else args.seed
        n = P.PROBE_LENGTH if args.probe_length is None else args.probe_length
        result, note = P.run_probe(model, n=n, seed=seed)
        source = {"probe": note, "seed": seed, "text": None}
    else:
        result = model.run(args.text, request=RunRequest(truncate=args.truncate))
        show_notice("heads", result)
        source = {"probe": None, "text": result.text}
    hs = H.score_result(result, exclude_bos=args.exclude_bos,
                        exclude_current_token=args.exclude_current,
                        unknown_ids=H.unknown_token_ids(model))
    if args.json:
        print(strict_json(heads_report(model, hs, source)))
        return 0
    c = model.config
    what = source["probe"] if args.probe else f"text \u201c{result.text}\u201d"
    print(f"{model.name}{checkpoint_opt.describe(model)}: {plural(c.n_layer, 'layer')} x {plural(c.n_head, 'head')}, "
          f"{tokens(result.n_tokens)}; {what}")
    opts = [o for o, on in (("exclude first token", args.exclude_bos),
                            ("exclude current token", args.exclude_current)) if on]
    if opts:
        print("options: " + ", ".join(opts))
    if hs.notice:
        print(f"note: {hs.notice}.")
    print()
    names = list(H.SCORE_NAMES)
    for line in heads_table(hs):
        print(line)
    print()
    for role in H.ROLES:
        # the number printed is the number tested: strength (score / coverage), beside the score
        # and the head's chance score, which a label must beat by CHANCE_MARGIN
        cleared = hs.cleared(role)
        bar = f"{H.THRESHOLDS[role]:g} and chance + {H.CHANCE_MARGIN:g}"
        if cleared:
            heads = ", ".join(head_title(cl, ch) for cl, ch, _ in cleared[:8])
            more = f" (+{len(cleared) - 8} more)" if len(cleared) > 8 else ""
            cl, ch, cs = cleared[0]
            print(f"{H.TITLES[role]}: {len(cleared)} head(s) clear {bar}: {heads}{more}; "
                  f"strongest: strength {H.strength_text(role, cs)} at {head_title(cl, ch)} (score {hs.scores[role][cl, ch]:.3f}, "
                  f"chance {hs.chance[role][cl, ch]:.3f})")
        elif role == "next" and c.causal:
            print(f"{H.TITLES[role]}: none (a causal model cannot attend ahead)")
        elif role in H.IDENTITY_ROLES and hs.notice:
            print(f"{H.TITLES[role]}: not labelled (too many unknown tokens)")
        else:
            where = "the probe" if args.probe else "this text"
            print(f"{H.TITLES[role]}: {H.no_head_clears(hs, role, where, probe=CLI_PROBE)}")
    if model.name == textbook.TEXTBOOK_NAME:
        print("\nHow the textbook heads were built:")
        for l in range(c.n_layer):
            for h in range(c.n_head):
                print(f"  {head_title(l, h)} {textbook.describe_head(l, h)}")
    print("\nDefinitions (A = the head's pattern [T, T], q = query row, k = key column):")
    for name in names:
        print(f"  {name}: {H.DEFINITIONS[name]}")
    print(f"  {H.LABEL_RULE}")
    print(f"  {H.CHANCE_RULE}")
    return 0


def _template_probe(args, kind) -> int:
    if args.probe_length is not None:
        raise InputError(f"--probe-length applies to --probe repeat; the {kind} probe has "
                         f"{P.N_ITEMS} template sentences")
    if args.exclude_bos or args.exclude_current:
        raise InputError("--exclude-bos and --exclude-current apply to role scores, not to the "
                         f"{kind} probe")
    model = checkpoint_opt.at(load_model(args.model), args)
    seed = P.SEED if args.seed is None else args.seed
    ts = P.run_template_probe(model, kind, seed=seed)
    if args.json:
        print(strict_json({"model": model.name, "seed": seed, **ts.to_json()}))
        return 0
    c = model.config
    print(f"{model.name}: {plural(c.n_layer, 'layer')} x {plural(c.n_head, 'head')}; {kind} probe, seed {seed}: "
          f"{ts.n_items} sentences scored, {ts.n_skipped} skipped (a key word is not one known token)")
    for example in ts.examples:
        print(f"  e.g. \u201c{example}\u201d")
    print()
    from attnviz.figures.numbers import plain_signed  # (here: the command loads figures only to print)

    print("layer head  label       score  accuracy   farther    nearer")
    passing = {(l, h) for l, h, *_ in ts.labelled()}
    for l in range(c.n_layer):
        for h in range(c.n_head):
            label = kind if (l, h) in passing else "-"
            print(f"{l:5d} {h:4d}  {label:<11} {ts.score[l, h]:6.3f} {ts.accuracy[l, h]:9.2f} "
                  f"{plain_signed(ts.far[l, h], 3):>9} {plain_signed(ts.near[l, h], 3):>9}")
    print()
    hits = ts.labelled()
    if hits:
        shown = ", ".join(head_title(l, h) for l, h, *_ in hits[:8])
        more = f" (+{len(hits) - 8} more)" if len(hits) > 8 else ""
        l, h, sc, acc = hits[0]
        print(f"{kind}: {len(hits)} head(s) pass: {shown}{more}; best score {sc:.3f} "
              f"(accuracy {acc:.2f}) at {head_title(l, h)}")
    else:
        l, h, sc, acc = ts.best()
        print(f"{kind}: no head passes (best score {sc:.3f}, accuracy {acc:.2f} at {head_title(l, h)})")
    print(f"\nDefinition: {P.DEFINITIONS[kind]}\n{P.LABEL_RULE}")
    return 0


def cmd_find(args) -> int:
    model = checkpoint_opt.at(load_model(args.model, text=args.text), args)
    result = model.run(args.text, request=RunRequest(truncate=args.truncate))
    show_notice("find", result)
    q = F.resolve_token(result, args.from_token)
    k = F.resolve_token(result, args.to_token)
    hits = F.find(result, q, k)
    if args.top is not None:
        hits = hits[: args.top]
    if args.json:
        doc = {"model": model.name, "text": result.text, "tokens": result.labels,
               "from": {"token": result.labels[q], "position": q},
               "to": {"token": result.labels[k], "position": k},
               "heads": [h._asdict() for h in hits]}
        doc.update(checkpoint_opt.entry(model))
        print(strict_json(doc))
        return 0
    print(f"{model.name}{checkpoint_opt.describe(model)}: from {quoted(result.labels[q])}@{q} (query) to {quoted(result.labels[k])}@{k} (key), "
          "every head ranked by specificity (weight minus the mean weight of the other queries that "
          "can see that key: in a decoder, those at or after it)")
    print("rank layer head  specificity  weight")
    for i, hit in enumerate(hits, 1):
        print(f"{i:4d} {hit.layer:5d} {hit.head:4d}  {hit.specificity:11.4f}  {hit.weight:.4f}")
    return 0
