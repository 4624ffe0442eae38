"""A corpus scan as the Corpus panel shows it, without widgets: the scan read once (`read_scan`:
each statistic's per-head mean, each head's top examples, the heads placed by behaviour) and an
example as rich text with its query and key tokens marked."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from attnviz.engine.reading.token_text import plural
from attnviz.engine.analysing.corpus_stats import place_heads
from attnviz.engine.analysing.heads import UNKNOWN_LIMIT
from attnviz.figures.style import FOCUS

SNIPPET = 60  # characters of text shown either side of an example's tokens


@dataclass(frozen=True)
class ScanView:
    """What the panel shows of one scan, read once (`read_scan`)."""

    path: Path
    model: str  # what --model named (loadable by the window)
    model_name: str
    model_sha256: str  # of the model's files (store.model_sha256), as scan.json records it
    n_layer: int
    n_head: int
    n_texts: int
    n_scanned: int  # texts that gave statistics (store.counts)
    n_errors: int
    complete: bool
    means: dict  # stat -> float64 [n_layer, n_head]
    examples: dict  # (layer, head) -> [store.Example] strongest first, texts included
    coords: np.ndarray  # [n_layer * n_head, 2]: the heads placed by behaviour (NaN: not placed)
    first_error: str | None = None  # the lowest text_id's error, as errors.parquet has it
    # {stat: "over N texts"} where a statistic's means are over fewer texts than n_scanned
    # (store.fewer_texts, as scan-report's figure notes them)
    stat_notes: dict = field(default_factory=dict)

    def stat_tip(self, name: str) -> str:
        """What statistic `name`'s means are over, for the statistic box's tooltip; where no text
        gave it a value, that, and why."""
        note = self.stat_notes.get(name)
        unknown = (f"a text with more than {UNKNOWN_LIMIT:.0%} unknown tokens gives no duplicate or "
                   "induction value")
        if not np.isfinite(self.means[name]).any():
            n = self.n_scanned
            every = "the one scanned text has" if n == 1 else f"each of the {n:,} scanned has"
            why = ("no text was scanned" if n == 0 else f"{unknown}, and {every}" if note is not None
                   else "")
            return "no text gave a value" + (f" ({why})" if why else "")
        if note is None:
            return f"its mean over the {plural(self.n_scanned, 'scanned text')}"
        return f"its mean {note} of the {self.n_scanned:,} scanned: {unknown}"

    def summary(self) -> str:
        """The texts that gave statistics of all the corpus'."""
        done = "" if self.complete else " (scan not finished)"
        line = (f"{self.model_name} · {plural(self.n_layer, 'layer')} × {plural(self.n_head, 'head')} · "
                f"{self.n_scanned} of {self.n_texts} texts scanned{done} · {plural(self.n_errors, 'error')}")
        if self.n_scanned == 0 and self.first_error:
            line += f". No text gave statistics: {self.first_error}"
        return line


def read_scan(path) -> ScanView:
    """A scan folder -> ScanView (DuckDB over its Parquet files; run off the main thread)."""
    from attnviz.corpus import store

    path = Path(path)
    m = store.read_manifest(path)
    c = store.counts(path)
    means = store.head_means(path, m.n_layer, m.n_head)
    examples: dict = {}
    for e in store.top_examples(path, int(m.options.get("examples") or 20), with_text=True):
        examples.setdefault((e.layer, e.head), []).append(e)
    coords = place_heads(means)
    first = None  # (read only where it is shown: no text gave statistics)
    if c["errors"] and not c["scanned"]:
        first = store.query(path, "SELECT text_id, error FROM errors ORDER BY text_id LIMIT 1",
                            tables=("errors",))
    return ScanView(path=path, model=m.model, model_name=m.model_name,
                    model_sha256=m.model_sha256, n_layer=m.n_layer,
                    n_head=m.n_head, n_texts=m.n_texts, n_scanned=c["scanned"], n_errors=c["errors"],
                    complete=m.complete, means=means, examples=examples, coords=coords,
                    first_error=f"text {first[0][0]}: {first[0][1]}" if first else None,
                    stat_notes=store.fewer_texts(store.stat_texts(path), c["scanned"]))


def files_hash(model) -> str:
    """The sha256 of a model's files, as attnviz scan records it (run off the main thread)."""
    from attnviz.corpus.store import model_sha256

    return model_sha256(model.path)


def example_html(e, offsets=None) -> str:
    """An example: its weight and two tokens, then its text around them, the query in orange and
    bold, the key bold and underlined. `offsets`: the text's token character spans (the loaded
    model's tokenizer, when it is the scan's); without them the text is shown unmarked."""
    head = (f"<b>{e.weight:.3f}</b> &nbsp; <span style='color:{FOCUS}'><b>"
            f"{html.escape(e.query_token)}</b></span>@{e.query_pos} → "
            f"<b><u>{html.escape(e.key_token)}</u></b>@{e.key_pos} &nbsp; text {e.text_id}")
    if not e.text:
        return head
    return f"{head}<br><span style='color:gray'>{marked_text(e, offsets)}</span>"


def marked_text(e, offsets) -> str:
    text = e.text
    spans = []  # [((start, end), "q" | "k" | "qk")]; a special token ([CLS], [SEP]) has no span
    if offsets and max(e.query_pos, e.key_pos) < len(offsets):
        q, k = tuple(offsets[e.query_pos]), tuple(offsets[e.key_pos])
        marks = {}
        for span, kind in ((q, "q"), (k, "k")):
            if span[1] > span[0]:
                marks[span] = marks.get(span, "") + kind
        spans = sorted(marks.items())
        if len(spans) == 2 and spans[0][0][1] > spans[1][0][0]:  # overlapping pieces: unmarked
            spans = []
    if not spans:
        cut = text[:2 * SNIPPET]
        return html.escape(" ".join(cut.split())) + ("…" if len(text) > 2 * SNIPPET else "")
    lo = max(0, spans[0][0][0] - SNIPPET)
    hi = min(len(text), spans[-1][0][1] + SNIPPET)
    out, pos = ["…" if lo > 0 else ""], lo
    for (a, b), kind in spans:
        out.append(html.escape(text[pos:a]))
        word = html.escape(text[a:b])
        if "k" in kind:
            word = f"<b><u>{word}</u></b>"
        if "q" in kind:
            word = f"<span style='color:{FOCUS}'><b>{word}</b></span>"
        out.append(word)
        pos = b
    out.append(html.escape(text[pos:hi]) + ("…" if hi < len(text) else ""))
    return "".join(out).replace("\n", " ")


def stat_value(scan: ScanView, name: str, layer: int, head: int) -> str:
    """A head's mean of one statistic as shown: "0.312", or "no value" where no text gave one."""
    v = float(scan.means[name][layer, head])
    return f"{v:.3f}" if np.isfinite(v) else "no value"


def head_readout(scan: ScanView, layer: int, head: int) -> str:
    """A head's line in the scatter (its tooltip): its name and each statistic that places it."""
    from attnviz.engine.analysing.corpus_stats import PROFILE_STATS
    from attnviz.engine.computing.patterns import head_title

    parts = [f"{n} {stat_value(scan, n, layer, head)}" for n in PROFILE_STATS]
    return f"{head_title(layer, head)}: " + ", ".join(parts)


def scatter_note(scan: ScanView) -> str:
    """What the scatter leaves out, in words ("" when it places every head on every statistic)."""
    from attnviz.engine.analysing.corpus_stats import PROFILE_STATS

    unused = [n for n in PROFILE_STATS if not np.isfinite(scan.means[n]).any()]
    left = int((~np.isfinite(scan.coords).all(axis=1)).sum())
    notes = []
    if unused:
        notes.append(f"{', '.join(unused)}: no value, not used")
    if left:
        notes.append(f"{left} head{'s' * (left != 1)} not placed (a statistic with no value)")
    return "; ".join(notes)
