"""Head roles: scores computed from attention patterns, and labels.

The repeated-random probe that these scores are usually read on is in probes.py, beside the
template probes; Find (which heads send one token to another) is in find.py; the detection
patterns and the scores read on them (mul_score, chance_score, distance, entropy) are in
head_patterns.py; the sums a pattern too large to hold is scored from, row block by row block, are
in head_sums.py.

Everything here is pure NumPy on `attentions [n_layer, n_head, T, T]` (rows sum to 1,
`attentions[l, h, q, k]` = weight from query q to key k) and token ids `[T]`.

Previous-token, duplicate-token and induction scores follow TransformerLens
`detect_head(..., error_measure="mul")` exactly (transformer_lens/head_detector.py): a 0/1 detection
pattern `D [T, T]` (lower triangular), optional zeroing of the first key column (`exclude_bos`) and of
the diagonal (`exclude_current_token`) in the attention pattern `A`, then

    score = sum(A * D) / sum(A)

i.e. the share of the head's (remaining) attention mass that falls on the pattern's cells.
Next-token, self and first-token sink use the same formula with their own pattern.

Scores are what TransformerLens reports. Labels compare roles fairly with a *strength*: the score
divided by the share of query rows that have at least one pattern cell (the most a perfect head can
reach without exclusions; for a sequence repeated twice, duplicate and induction patterns exist only
in the second half, so a perfect head scores about 0.5 there).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.reading.token_text import plural, tokens
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.analysing.head_patterns import (
    IDENTITY_ROLES, ROLES, chance_score, detection_pattern, detection_rows, entropy, mean_distance,
    mul_score, per_layer, row_coverage,
)
from attnviz.engine.analysing.head_sums import EXCLUDING, RowSums

# descriptive numbers shown beside the role scores (no label, no threshold)
METRICS = ("distance", "entropy")
SCORE_NAMES = ROLES + METRICS
MIXED = "mixed"

# a head gets a role when its strength (score / share of rows with a pattern cell) clears this;
# Compare counts the heads that clear the induction one as induction heads (compare.INDUCTION_THRESHOLD)
THRESHOLDS = {
    "previous": 0.5,
    "next": 0.5,
    "self": 0.5,
    "sink": 0.5,
    "duplicate": 0.5,
    "induction": 0.5,
}
# duplicate / induction need this many query rows with a pattern cell before any label is given
MIN_ROWS = 3
# a label also needs the score to beat the head's chance score (its attention spread evenly over the
# keys it may see, row by row) by this much
CHANCE_MARGIN = 0.1
# the share of unknown tokens ([UNK]) above which the roles that compare token ids are not given
UNKNOWN_LIMIT = 0.2

TITLES = {
    "previous": "previous token",
    "next": "next token",
    "self": "self (current token)",
    "sink": "first-token sink",
    "duplicate": "duplicate token",
    "induction": "induction",
    "distance": "mean attention distance",
    "entropy": "entropy",
}

_MUL = ("score = sum(A * D) / sum(A): the share of the head's attention mass A that lands on the "
        "cells of the detection pattern D")
_TL = " (TransformerLens detect_head, error_measure=\"mul\")"
_EXCL = ("; 'exclude first token' zeroes column 0 of A and 'exclude current token' zeroes its "
         "diagonal before summing")

DEFINITIONS = {
    "previous": ("Previous token: D[q, q-1] = 1 for q >= 1. " + _MUL + _TL + _EXCL + "."),
    "next": ("Next token: D[q, q+1] = 1 for q < T-1 (only a bidirectional model can look ahead). "
             + _MUL + _EXCL + "."),
    "self": ("Self: D[q, q] = 1, the token attends to itself. " + _MUL
             + "; no exclusions (they would remove the diagonal)."),
    "sink": ("First-token sink: D[q, 0] = 1, attention parked on the first token ([CLS] or BOS). "
             + _MUL + "; no exclusions (they would remove column 0)."),
    "duplicate": ("Duplicate token: D[q, k] = 1 for k < q where token k is the same id as token q "
                  "(an earlier copy). " + _MUL + _TL + _EXCL + ". Only rows whose token occurred "
                  "before can score, so use the probe (a random sequence repeated twice)."),
    "induction": ("Induction: D[q, k] = 1 for 1 <= k <= q where token k-1 is the same id as token q "
                  "(the token that followed an earlier copy of the current token). " + _MUL + _TL
                  + _EXCL + ". Only rows whose token occurred before can score, so use the probe."),
    "distance": ("Mean attention distance: sum over k of A[q, k] * |q - k|, averaged over query "
                 "rows q, in tokens."),
    "entropy": ("Entropy: -sum over k of A[q, k] * log2 A[q, k], averaged over query rows q, in "
                "bits (0 = all weight on one key; log2(n) = spread evenly over n keys)."),
}

LABEL_RULE = (
    "Label: each head gets the role with the highest strength among those whose strength clears "
    "the threshold (" + ", ".join(f"{r} {t:g}" for r, t in THRESHOLDS.items()) + "), and 'mixed' "
    "otherwise. Strength = score / (share of query rows that have at least one cell in D), capped "
    f"at 1; a role needs at least {MIN_ROWS} such rows (an empty or two-token text labels no head), "
    f"and its score must beat the head's chance score by {CHANCE_MARGIN:g}. Unknown tokens ([UNK]) "
    f"never count as repeats; above {UNKNOWN_LIMIT:.0%} unknown tokens duplicate and induction are "
    "not labelled."
)
CHANCE_RULE = (
    "Chance: the score the same head would get if, in every query row, it spread its attention "
    "evenly over the keys it may see (k <= q in a decoder), with the head's own row masses and the "
    "same exclusions: sum over q of mass_q * |D_q| / |keys_q|, over the total mass."
)


@dataclass(frozen=True)
class HeadScores:
    """Scores of every head. `scores[name]` and `strength[role]` are [n_layer, n_head]."""

    scores: dict
    strength: dict
    coverage: dict  # role -> share of query rows with at least one pattern cell
    labels: list  # [n_layer][n_head] of role names or "mixed"
    exclude_bos: bool = False
    exclude_current_token: bool = False
    tokens: list = field(default_factory=list)  # display labels of the scored sequence
    chance: dict = field(default_factory=dict)  # role -> [n_layer, n_head]: the head spread evenly
    unknown_share: float = 0.0  # share of the tokens the vocabulary did not know ([UNK])
    notice: str | None = None  # why some roles are not labelled (too many unknown tokens)
    rows: dict = field(default_factory=dict)  # role -> query rows with at least one pattern cell

    @property
    def n_layer(self):
        return len(self.labels)

    @property
    def n_head(self):
        return len(self.labels[0]) if self.labels else 0

    def cleared(self, role):
        """Heads labelled-worthy for `role` (strength clears the threshold and the score beats the
        head's chance score by CHANCE_MARGIN), strongest first: [(layer, head, strength)]."""
        s = self.strength[role]
        idx = np.argwhere(passes(role, s, self.scores[role], self.chance.get(role)))
        hits = [(int(l), int(h), float(s[l, h])) for l, h in idx]
        return sorted(hits, key=lambda t: (-t[2], t[0], t[1]))

    def best(self, name):
        """(layer, head, score) of the highest score for `name` (lowest for nothing: entropy too)."""
        s = self.scores[name]
        flat = np.where(np.isnan(s), -np.inf, s)
        l, h = np.unravel_index(int(np.argmax(flat)), s.shape)
        return int(l), int(h), float(s[l, h])

    def best_strength(self, role):
        """(layer, head, strength) of the strongest head for `role`: the number labels are tested on."""
        s = self.strength[role]
        l, h = np.unravel_index(int(np.argmax(s)), s.shape)
        return int(l), int(h), float(s[l, h])

    def candidate(self, role, skip=()):
        """best_strength among the heads not in `skip` [(layer, head)]; None where none has any."""
        s = self.strength[role].copy()
        s[tuple(np.array(sorted(skip), dtype=int).reshape(-1, 2).T)] = -1.0  # never named
        l, h = np.unravel_index(int(np.argmax(s)), s.shape)
        return (int(l), int(h), float(s[l, h])) if s[l, h] > 0 else None

    def unclaimed_roles(self):
        """Roles no head clears: the window and CLI say so instead of inventing one."""
        return [r for r in ROLES if not self.cleared(r)]

    def to_json(self):
        def clean(a):
            return [[None if np.isnan(v) else round(float(v), 6) for v in row] for row in a]

        return {
            "scores": {name: clean(self.scores[name]) for name in SCORE_NAMES},
            "strength": {role: clean(self.strength[role]) for role in ROLES},
            "labels": self.labels,
            "coverage": {role: round(float(c), 6) for role, c in self.coverage.items()},
            "chance": {role: clean(self.chance[role]) for role in ROLES if role in self.chance},
            "chance_margin": CHANCE_MARGIN,
            "unknown_share": round(self.unknown_share, 6),
            "notice": self.notice,
            "thresholds": dict(THRESHOLDS),
            "min_rows": MIN_ROWS,
            "exclude_bos": self.exclude_bos,
            "exclude_current_token": self.exclude_current_token,
            "definitions": {**DEFINITIONS, "label": LABEL_RULE, "chance": CHANCE_RULE},
            "tokens": list(self.tokens),
        }


def unknown_mask(ids, unknown_ids=()):  # [T], ids -> bool [T]
    """Which tokens are the tokenizer's unknown token ([UNK]): never repeats of anything."""
    ids = np.asarray(ids)
    if not len(unknown_ids):
        return np.zeros(ids.shape, dtype=bool)
    return np.isin(ids, np.fromiter(unknown_ids, dtype=np.int64))


def unknown_notice(unknown) -> tuple[float, str | None]:  # bool [T] -> share, why identity roles go unlabelled
    """The share of unknown tokens, and the one-line reason duplicate and induction are not
    labelled when it is over UNKNOWN_LIMIT (None otherwise)."""
    T = len(unknown)
    share = float(unknown.mean())
    if share <= UNKNOWN_LIMIT:
        return share, None
    n = int(unknown.sum())
    return share, (f"{n} of the {tokens(T)} {'is' if n == 1 else 'are'} unknown to the vocabulary "
                   f"({share:.0%}, more than {UNKNOWN_LIMIT:.0%}): duplicate and induction "
                   "are not labelled, since the text's words cannot be told apart")


def check_patterns(attentions, ids, what: str = "head scores"):
    """-> (attentions [n_layer, n_head, T, T], ids [T]) as arrays, T >= 2; InputError naming the
    shape otherwise."""
    attentions = np.asarray(attentions)
    ids = np.asarray(ids)
    if attentions.ndim != 4 or attentions.shape[-1] != attentions.shape[-2]:
        raise InputError(f"attention patterns must be [n_layer, n_head, T, T]; got {attentions.shape}")
    T = attentions.shape[-1]
    if T < 2:
        raise InputError(f"{what} need at least 2 tokens; the text gives {T}")
    if ids.shape != (T,):
        raise InputError(f"{plural(ids.shape[0] if ids.ndim else 0, 'token id')} for {plural(T, 'attention position')}")
    return attentions, ids


def score_heads(attentions, ids, exclude_bos=False, exclude_current_token=False, tokens=None,
                unknown_ids=(), stop=None):
    """Every score of every head: [n_layer, n_head, T, T], ids [T] -> HeadScores.

    `unknown_ids`: the tokenizer's unknown-token ids ([UNK]), which never count as repeats; when
    more than UNKNOWN_LIMIT of the tokens are unknown, no role that depends on token identity
    (duplicate, induction) is labelled at all. `stop()`, asked before each role, raises Cancelled
    when it says so (a newer text: the window's scores give way to its run)."""
    attentions, ids = check_patterns(attentions, ids)
    T = attentions.shape[-1]
    unknown = unknown_mask(ids, unknown_ids)
    unknown_share, notice = unknown_notice(unknown)
    # a causal model's heads never look ahead: its keys are k <= q
    causal = not np.triu(attentions, 1).any()
    allowed = np.tril(np.ones((T, T), dtype=bool)) if causal else np.ones((T, T), dtype=bool)
    excl = {"exclude_bos": exclude_bos, "exclude_current_token": exclude_current_token}
    scores, strength, coverage, chance, n_rows = {}, {}, {}, {}, {}
    for role in ROLES:
        if stop is not None and stop():
            raise Cancelled("newer head scores are asked for")
        d = detection_pattern(role, ids, unknown)
        opts = excl if role in EXCLUDING else {}
        scores[role] = mul_score(attentions, d, **opts)
        chance[role] = per_layer(lambda a: chance_score(a, d, allowed, **opts), attentions)
        share, rows = row_coverage(d)
        coverage[role], n_rows[role] = share, rows
        enough = rows >= MIN_ROWS  # two tokens say nothing about a head's habit
        if role in IDENTITY_ROLES and notice:
            enough = False
        s = np.nan_to_num(scores[role] / share, nan=0.0) if enough else np.zeros(scores[role].shape)
        strength[role] = np.minimum(s, 1.0)
    scores["distance"] = mean_distance(attentions)
    scores["entropy"] = entropy(attentions)
    return HeadScores(
        scores=scores, strength=strength, coverage=coverage,
        labels=label_heads(strength, scores=scores, chance=chance),
        exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
        tokens=list(tokens) if tokens is not None else [],
        chance=chance, unknown_share=unknown_share, notice=notice, rows=n_rows,
    )


def passes(role, strength, score, chance, thresholds=THRESHOLDS):  # [n_layer, n_head] -> bool
    ok = strength >= thresholds[role]
    if chance is not None:
        with np.errstate(invalid="ignore"):
            ok &= np.nan_to_num(score - chance, nan=-1.0) >= CHANCE_MARGIN
    return ok


def label_heads(strength, thresholds=THRESHOLDS, scores=None, chance=None):
    """Strongest role whose strength clears its threshold (and, given `scores` and `chance`, whose
    score beats the head's chance score by CHANCE_MARGIN), else "mixed":
    role -> [n_layer, n_head] -> [n_layer][n_head]."""
    stack = np.stack([strength[r] for r in ROLES])  # [n_role, n_layer, n_head]
    if scores is not None and chance is not None:
        ok = np.stack([passes(r, strength[r], scores[r], chance[r], thresholds) for r in ROLES])
    else:
        limits = np.array([thresholds[r] for r in ROLES])[:, None, None]
        ok = stack >= limits
    masked = np.where(ok, stack, -np.inf)
    best = np.argmax(masked, axis=0)  # first role wins a tie
    any_ok = ok.any(axis=0)
    n_layer, n_head = best.shape
    return [[ROLES[best[l, h]] if any_ok[l, h] else MIXED for h in range(n_head)]
            for l in range(n_layer)]


def score_result(result, exclude_bos=False, exclude_current_token=False, unknown_ids=(), stop=None):
    """Scores for an engine RunResult (`unknown_ids`: see `unknown_token_ids(model)`; `stop`: see
    score_heads)."""
    return score_heads(result.attentions, result.input_ids, exclude_bos=exclude_bos,
                       exclude_current_token=exclude_current_token, tokens=result.labels,
                       unknown_ids=unknown_ids, stop=stop)


# how the window scores the repeated-random probe, for a text that repeats too little
WINDOW_PROBE = "the probe (Head roles \u2192 Score on \u2192 probe: random tokens, repeated twice)"


def no_head_clears(hs, role, where="this text", probe=WINDOW_PROBE, skip=()):
    """The one statement for a role no head clears (the roles panel, the sample guide, the CLI): the
    strongest head's strength and score on `where`, each beside its bar (the threshold; chance +
    CHANCE_MARGIN), saying which it misses; or why no head has a strength (too many unknown
    tokens; too few rows: `probe` names how to score the probe where the line is read). `skip`:
    heads switched off in the run, never named ("no head still on")."""
    n, on = hs.rows.get(role), " still on" if skip else ""
    if role in IDENTITY_ROLES and hs.notice:
        return f"{hs.notice[0].upper()}{hs.notice[1:]}."
    if n is not None and n < MIN_ROWS:
        hint = f"; {probe} repeats every token" if role in IDENTITY_ROLES else ""
        have = "no query row has" if n == 0 else f"only {n} query {'row has' if n == 1 else 'rows have'}"
        return (f"No head is labelled {TITLES[role]} on {where}: {have} a cell of its "
                f"detection pattern, and a strength needs at least {MIN_ROWS}{hint}.")
    best = hs.candidate(role, skip)
    if best is None:
        return f"No head{on} has any {TITLES[role]} strength on {where}."
    l, h, strength = best
    score, chance, bar = float(hs.scores[role][l, h]), float(hs.chance[role][l, h]), THRESHOLDS[role]
    ok_s, ok_c = strength >= bar, score - chance >= CHANCE_MARGIN  # passes(), head by head
    s_text, _, s_side = _sides(strength, bar, ok_s)
    sc_text, need, c_side = _sides(score, chance + CHANCE_MARGIN, ok_c)
    first = f"strength {s_text}, {s_side} the threshold {bar:g}"
    second = (f"score {sc_text}, {c_side} its chance score {chance:.{_decimals(need)}f} + "
              f"{CHANCE_MARGIN:g} = {need}")
    join = ", and" if ok_s == ok_c else ", but" if ok_s else ", though"
    return (f"No head {'still on' if skip else 'of this model'} clears the {TITLES[role]} bar on "
            f"{where}: the strongest{on}, {head_title(l, h)}, has {first}{join} {second}.")


def strength_text(role, value, digits=3) -> str:
    """`role`'s strength as every table, tooltip and sentence prints it: `digits` decimals, or more
    where fewer would round it onto the other side of its threshold (0.499992 reads 0.49999, never
    0.500 beside a threshold of 0.5 it misses)."""
    value = float(value)
    return f"{value:.{digits}f}" if np.isnan(value) else _sides(value, THRESHOLDS[role], value >= THRESHOLDS[role], digits)[0]


def chance_texts(score, chance, digits=3) -> tuple[str, str]:
    """A role score and the head's chance score as every tooltip and table prints them: `digits`
    decimals, or more where fewer would put the printed score's lead over chance on the other side
    of CHANCE_MARGIN (a lead of 0.09999 never reads 0.235 beside a chance of 0.135). NaN as
    "nan" (the caller's dash)."""
    score, chance = float(score), float(chance)
    if np.isnan(score) or np.isnan(chance):
        return f"{score:.{digits}f}", f"{chance:.{digits}f}"
    s_text, need, _ = _sides(score, chance + CHANCE_MARGIN, score - chance >= CHANCE_MARGIN, digits)
    return s_text, f"{chance:.{_decimals(need)}f}"


def _decimals(text: str) -> int:  # "0.23500" -> 5
    return len(text.partition(".")[2])


def _sides(value, bar, ok, digits=3):
    """`value` and `bar` at the fewest decimals (`digits` or more) that show `value` on its side of
    `bar` (`ok`: at or over it), and that side: never 0.500 beside a threshold of 0.5 it misses."""
    for d in range(digits, 10):
        v, b = f"{value:.{d}f}", f"{bar:.{d}f}"
        if (float(v) >= float(b)) == ok:
            return v, b, "under" if not ok else "at" if float(v) == float(b) else "over"
    return repr(float(value)), repr(float(bar)), "over" if ok else "under"


def unknown_token_ids(model) -> frozenset:
    """The ids a model's tokenizer gives to text its vocabulary lacks ([UNK], <|unk|>); empty for
    byte-level BPE, which spells any text out of bytes."""
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return frozenset()
    name = tok.unknown_token()  # (a tokenizer built for one text answers without the whole)
    i = tok.token_to_id(name) if name else None
    return frozenset() if i is None else frozenset({int(i)})


# ---------------------------------------------------------------- scores streamed over row blocks

def score_blocks(blocks, n_layer, n_head, ids, causal, exclude_bos=False,
                 exclude_current_token=False, tokens=None, unknown_ids=()):
    """score_heads of a pattern too large to hold: the same HeadScores from `blocks`, an iterable
    of (layer, a, rows [n_head, m, w]) covering every layer's query rows once (keys 0..w-1; the keys
    after w hold 0), e.g. from LongPatterns.blocks. `causal`: whether the model's queries see only
    earlier keys."""
    sums = _row_sums(n_layer, n_head, ids, causal, exclude_bos, exclude_current_token, unknown_ids)
    for layer, a, rows in blocks:
        sums.add(layer, a, rows)
    return _scores_of(sums, tokens)


def score_layers(layer_blocks, n_layer, n_head, ids, causal, exclude_bos=False,
                 exclude_current_token=False, tokens=None, unknown_ids=(), threads=1):
    """score_blocks with the layers shared out to `threads` threads (the caller's one of them;
    parallel.in_threads): layer_blocks(layer) gives that layer's (a, rows [n_head, m, w]) blocks,
    on the thread that took the layer. A layer's sums are rows of their own, so the threads share
    only the order of the layers; NumPy's passes over a block release the GIL. An error from
    layer_blocks (Cancelled: a newer text) stops the other threads before their next layer and is
    raised here."""
    from attnviz.engine.parallel import in_threads

    sums = _row_sums(n_layer, n_head, ids, causal, exclude_bos, exclude_current_token, unknown_ids)

    def layer_task(layer):
        for a, rows in layer_blocks(layer):
            sums.add(layer, a, rows)
    in_threads(n_layer, layer_task, threads)
    return _scores_of(sums, tokens)


def _row_sums(n_layer, n_head, ids, causal, exclude_bos, exclude_current_token, unknown_ids):
    ids = np.asarray(ids)
    if len(ids) < 2:
        raise InputError(f"head scores need at least 2 tokens; got {len(ids)}")
    unknown = unknown_mask(ids, unknown_ids)
    return RowSums(n_layer, n_head, ids, unknown, causal, exclude_bos, exclude_current_token)


def _scores_of(sums, tokens) -> HeadScores:
    """HeadScores from the row sums of every layer (score_blocks, score_layers)."""
    ids, unknown, T = sums.ids, sums.unknown, sums.T
    unknown_share, notice = unknown_notice(unknown)
    scores, strength, coverage, chance, n_rows = {}, {}, {}, {}, {}
    for role in ROLES:
        den = sums.den[role in EXCLUDING]
        scores[role] = sums.ratio(sums.num[role], den)
        chance[role] = sums.ratio(sums.chance_num[role], den)
        rows = sum(int(detection_rows(role, ids, a, min(T, a + 256), unknown).any(axis=1).sum())
                   for a in range(0, T, 256))
        coverage[role] = share = rows / T
        n_rows[role] = rows
        enough = rows >= MIN_ROWS and not (role in IDENTITY_ROLES and notice)
        s = np.nan_to_num(scores[role] / share, nan=0.0) if enough else np.zeros(scores[role].shape)
        strength[role] = np.minimum(s, 1.0)
    scores["distance"] = sums.distance / T
    scores["entropy"] = sums.entropy / T
    return HeadScores(
        scores=scores, strength=strength, coverage=coverage,
        labels=label_heads(strength, scores=scores, chance=chance),
        exclude_bos=sums.bos, exclude_current_token=sums.cur,
        tokens=list(tokens) if tokens is not None else [],
        chance=chance, unknown_share=unknown_share, notice=notice, rows=n_rows,
    )
