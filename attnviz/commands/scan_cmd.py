"""`attnviz scan` (every head's statistics and top examples over a corpus, on Dask, into Parquet)
and `attnviz scan-report` (a per-head summary of a scan folder, read with DuckDB, and a PNG).

Dask, pyarrow and DuckDB are imported when these commands run, never at start-up."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from attnviz.engine.reading.token_text import plural
from attnviz.commands.checks import add_model, non_negative, positive
from attnviz.corpus import DEFAULT_BATCH, DEFAULT_EXAMPLES
from attnviz.engine.analysing import heads as H
from attnviz.engine.analysing.corpus_stats import EXAMPLES_RULE, HEAD_STATS
from attnviz.engine.parallel import cores
from attnviz.engine.errors import InputError
from attnviz.engine.reading.token_text import quoted


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan", help="every head's statistics and top examples over a corpus (Dask, Parquet)",
        description="Run every text of a corpus through the model and store, per text and head, "
                    "n_tokens, first_token_mass, entropy (nats), mean_distance, previous, duplicate "
                    "and induction, and each head's top examples, as Parquet files in --out. Batches "
                    "of texts are Dask tasks, on a LocalCluster of processes or on the cluster at "
                    "--scheduler. Rerunning the same command after an interrupt resumes it.")
    add_model(p, "on --scheduler every worker must be able to open it")
    p.add_argument("--corpus", required=True, metavar="FILE",
                   help=".txt (one text per line, or paragraphs: --split), .jsonl (a 'text' field) "
                        "or .parquet (a 'text' column)")
    p.add_argument("--out", required=True, metavar="DIR", help="the scan folder (new, empty, or "
                   "the same scan's to resume it)")
    p.add_argument("--workers", type=non_negative, metavar="N",
                   help="processes of the LocalCluster (default: the cores, here "
                        f"{cores()}); 0 runs in this process without Dask")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="an existing Dask cluster's scheduler, e.g. tcp://host:8786")
    p.add_argument("--batch", type=positive, default=DEFAULT_BATCH, metavar="B",
                   help="texts per task and per Parquet file (default: %(default)s)")
    p.add_argument("--max-tokens", type=positive, metavar="T",
                   help="cut each text to T tokens (default: a text longer than the model's "
                        "positions is recorded in errors.parquet)")
    p.add_argument("--split", choices=("lines", "paragraphs"), default="lines",
                   help=".txt: one text per line, or paragraphs between blank lines (default: lines)")
    p.add_argument("--column", metavar="NAME", help="the .jsonl field or .parquet column holding "
                   "the text (default: text)")
    p.add_argument("--examples", type=positive, default=DEFAULT_EXAMPLES, metavar="K",
                   help="top examples kept per head (default: %(default)s)")
    p.set_defaults(func=cmd_scan)

    p = sub.add_parser(
        "scan-report", help="per-head summary of a scan folder (DuckDB) and a PNG of the means",
        description="Read a scan folder's Parquet files with DuckDB, print each head's mean "
                    "statistics and strongest example, and draw the layer x head means as a PNG.")
    p.add_argument("dir", metavar="DIR", help="a folder written by attnviz scan")
    p.add_argument("--png", metavar="FILE", help="the figure (default: DIR/means.png)")
    p.add_argument("--width", type=positive, default=1500, help="PNG width in pixels (default: %(default)s)")
    p.set_defaults(func=cmd_scan_report)


def cmd_scan(args) -> int:
    from attnviz.corpus import store
    from attnviz.corpus.scan import scan

    if args.scheduler and args.workers is not None:
        raise InputError("--workers sizes the LocalCluster; with --scheduler the cluster's own "
                         "workers run the scan")
    in_process = args.workers == 0
    where = (f"the Dask cluster at {args.scheduler}" if args.scheduler else
             "this process (no Dask)" if in_process else
             f"a LocalCluster of {args.workers or cores()} processes, one thread each")

    def start(plan):
        m = plan.manifest
        print(f"scanning {m.n_texts} texts of {args.corpus} in {m.n_batches} batches"
              f"{f' ({plan.n_done} finished before)' if plan.n_done else ''} with {m.model_name} "
              f"on {where}", flush=True)
        print(EXAMPLES_RULE, flush=True)

    try:
        manifest, done = scan(args.out, args.model, args.corpus, split=args.split,
                              column=args.column, batch=args.batch, max_tokens=args.max_tokens,
                              examples=args.examples, workers=args.workers,
                              scheduler=args.scheduler, in_process=in_process, on_plan=start,
                              verbose=args.verbose)
    except KeyboardInterrupt:
        _say_resume(args)
        raise
    c = store.counts(args.out)
    batches = f"{manifest.n_batches:,} batch" + ("" if manifest.n_batches == 1 else "es")
    print(f"{args.out}: {plural(manifest.n_texts, 'text')} in {batches} "
          f"({len(done)} run now), {plural(c['head_rows'], 'head row')}, {manifest.n_errors} in "
          f"{store.ERRORS_FILE}")
    print(f"summary: attnviz scan-report {args.out}")
    return 0


def _say_resume(args):
    try:
        from attnviz.corpus import store

        m = store.read_manifest(args.out)
        n = len(store.finished_batches(Path(args.out), m.n_batches))
        print(f"attnviz scan: interrupted with {n} of {m.n_batches} batches finished; the same "
              "command resumes the scan", file=sys.stderr)
    except Exception:  # noqa: BLE001 - the interrupt itself is what matters
        pass


def report_rows(out, manifest):
    """[(layer, head, texts, {stat: mean}, best Example or None)] for every head."""
    from attnviz.corpus import store

    means = store.head_means(out, manifest.n_layer, manifest.n_head)
    best = {(e.layer, e.head): e for e in store.top_examples(out, 1)}
    rows = []
    for l in range(manifest.n_layer):
        for h in range(manifest.n_head):
            texts = means["texts"][l, h]  # NaN: no text stored for this head yet
            rows.append((l, h, 0 if math.isnan(texts) else int(texts),
                         {n: means[n][l, h] for n in HEAD_STATS}, best.get((l, h))))
    return rows, means


def cmd_scan_report(args) -> int:
    from attnviz.corpus import store

    out = Path(args.dir)
    png = Path(args.png) if args.png else out / "means.png"
    if png.suffix.lower() != ".png":
        raise InputError(f"--png must end in .png, got {png.name}")
    m = store.read_manifest(out)
    c = store.counts(out)
    state = "complete" if m.complete else (
        f"not finished: {len(store.finished_batches(out, m.n_batches))} of {m.n_batches} batches")
    print(f"{out}: {m.model_name} ({plural(m.n_layer, 'layer')} x {plural(m.n_head, 'head')}) on {m.corpus}, "
          f"{m.n_texts} texts, {state}; {plural(c['scanned'], 'text')} scanned, {plural(c['errors'], 'error')}")
    rows, means = report_rows(out, m)
    short = {"first_token_mass": "first", "entropy": "entropy", "mean_distance": "distance",
             "previous": "previous", "duplicate": "duplicate", "induction": "induction"}
    print("layer head  texts " + " ".join(f"{short[n]:>9}" for n in HEAD_STATS)
          + "  top example (query -> key, weight)")
    for l, h, texts, vals, best in rows:
        nums = " ".join("      nan" if math.isnan(v) else f"{v:9.3f}" for v in vals.values())
        ex = (f"{quoted(best.query_token)}@{best.query_pos} -> {quoted(best.key_token)}@{best.key_pos}, "
              f"{best.weight:.3f} (text {best.text_id})" if best else "-")
        print(f"{l:5d} {h:4d} {texts:6d} {nums}  {ex}")
    print("means over the texts scanned (a text in errors.parquet gives none); entropy in nats, "
          f"mean_distance in tokens; duplicate and induction leave out texts with more than "
          f"{H.UNKNOWN_LIMIT:.0%} unknown tokens")
    from attnviz.commands.export_cmd import offscreen
    from attnviz.figures.data import write_atomic

    with offscreen():
        from attnviz.figures.corpus import means_png

        data = means_png(means, HEAD_STATS, f"{m.model_name}: head means over "
                         f"{plural(c['scanned'], 'text')} of {Path(m.corpus).name}", width=args.width,
                         notes=store.fewer_texts(store.stat_texts(out), c["scanned"]))
    write_atomic([(png, data)])
    print(f"{png}: layer x head means of {', '.join(HEAD_STATS)}")
    return 0

