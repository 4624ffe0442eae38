"""Guided samples: sentences that show a known head behaviour, each with one line on what to look
for and a rule that finds, for whatever model is loaded, the head that shows it best.

Nothing here names a head: the best head is computed from the result's own patterns, with the same
scores, thresholds and baselines the roles panel uses (`heads`), so a model without such a head is
told so ("no head clears ...") instead of being shown a plausible wrong one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from attnviz.engine.analysing import heads as H
from attnviz.engine.errors import InputError
from attnviz.engine.analysing.find import find, resolve_token
from attnviz.engine.computing.edits import ReplaceHead
from attnviz.engine.computing.patterns import head_title
from attnviz.engine.reading.registry import DEFAULT_TEXT
from attnviz.engine.reading.token_text import plain, quoted, tokens

# a Find hit is claimed only when the query's weight on the key beats the mean weight the other
# queries give that key by this much (the same margin a role needs over its chance score)
SPECIFICITY_MIN = H.CHANCE_MARGIN
# a head short of that bar is named as the closest only from half of it up: below, every head gives
# the pair about what the other queries do (a model that never learnt it: 1.5e-6 and less), and
# which of them ranks first is noise, no answer
CLOSEST_MIN = SPECIFICITY_MIN / 2

_LONG = (
    "The history of the printing press is a story about attention as much as about machines. "
    "Before Gutenberg, a scribe could copy a few pages a day, and a library of a hundred books was a "
    "treasure guarded by monks. When movable type arrived in Mainz around 1450, the price of a book "
    "fell so quickly that within fifty years millions of volumes were circulating across Europe. "
    "Readers who had heard scripture only in Latin could now hold it in their own language, argue "
    "about it, and print their arguments in return. Pamphlets travelled faster than armies, and "
    "rulers learned that controlling what people read was harder than controlling where they lived. "
    "Scientists shared measurements instead of rumours, so that an astronomer in Prague could check "
    "the tables of an astronomer in Copenhagen without ever meeting him. The printing press did not "
    "make people wiser on its own, but it changed which ideas could reach them, and how often."
)


@dataclass(frozen=True)
class Sample:
    title: str
    text: str
    look_for: str  # one line: what the sample shows
    roles: tuple[str, ...] = ()  # head roles tried in order: the first one some head clears wins
    # roles tried after those, where no head clears them: a head of one is shown as the closest to
    # what the sample looks for, never as a finding (a duplicate-token head is no induction head)
    closest: tuple[str, ...] = ()
    find: tuple[str, str] | None = None  # (query token, key token): heads ranked by specificity


SAMPLES: tuple[Sample, ...] = (
    Sample("Agreement", DEFAULT_TEXT,
           "The verb 'are' looks back past 'cabinet' to its subject 'keys' in some heads.",
           find=("are", "keys")),
    Sample("Repeated names", "When Mary and John went to the store, John gave a drink to Mary.",
           "The second 'John' and 'Mary' attend to their first mention (duplicate-token heads).",
           roles=("duplicate",), closest=("induction",)),
    Sample("Pronouns", "The trophy did not fit in the suitcase because it was too big.",
           "'it' attends to 'trophy' in some heads; the weight alone does not prove coreference.",
           find=("it", "trophy")),
    Sample("Repeated random sequence",
           "violet anchor nine tulip gravel comet lantern otter violet anchor nine tulip gravel comet "
           "lantern otter",
           "In the second half each word attends to the word after its first copy (induction, in a "
           "decoder) or to its first copy (duplicate).",
           roles=("induction", "duplicate")),
    # rare names split into several tokens, said twice: in a decoder (SmolLM2) the induction heads
    # complete each name's second occurrence from its first
    Sample("Made-up names, repeated (induction)",
           "Dr Zorblax Quintrel met Mrs Vashmere Okkadine in Plumbrook. Later, Dr Zorblax Quintrel "
           "thanked Mrs Vashmere Okkadine in Plumbrook.",
           "In the second mention each name piece attends to the piece that followed it the first "
           "time: an induction head copying a pattern seen earlier.",
           roles=("induction",), closest=("duplicate",)),
    Sample("Long paragraph", _LONG,
           "Over a long text some heads keep to the previous token, others park on the first "
           "token (a sink).",
           roles=("previous", "sink")),
)


def sample_for_text(text: str) -> Sample | None:
    """The sample whose text this is, exactly (an edited sample is the user's own sentence)."""
    for s in SAMPLES:
        if s.text == text:
            return s
    return None


@dataclass(frozen=True)
class Guide:
    """The head a sample points to on one result. `claimed` is False when no head clears the bar of
    a role the sample looks for; then (layer, head) is the closest candidate, shown as such, never
    as a finding: the strongest head of a `closest` role that clears that role's bar, else the
    strongest for the first role; or None where no head is one (none has any strength for it; a
    Find sample's: none singles the pair out by CLOSEST_MIN)."""

    layer: int | None
    head: int | None
    claimed: bool
    message: str


def guide(sample: Sample, result, unknown_ids=(), scores=None) -> Guide:
    """The head that shows `sample`'s behaviour best in `result` (the sample's own run). `scores`:
    the result's HeadScores when they are already computed (the window's state holds the typed
    text's, scored once per result); else the result is scored here (`unknown_ids`: see
    heads.unknown_token_ids). A Find sample needs no scores. In a changed run the heads switched
    off are never named as its head (their patterns are drawn, their outputs removed); those that
    would have been are said to be off."""
    if result.n_tokens < 2:
        raise InputError("a guide needs at least 2 tokens")
    off = switched_off(result)
    if sample.find is not None:
        return _guide_find(sample, result, off)
    if scores is None:
        scores = H.score_result(result, unknown_ids=unknown_ids)
    role, cleared, gone = _first_cleared(scores, sample.roles, off)  # gone: what those off would show
    if cleared:
        l, h, s = cleared[0]
        return Guide(l, h, True, f"{head_title(l, h)}: {H.TITLES[role]} strength {H.strength_text(role, s, 2)} "
                     f"on this text (score {scores.scores[role][l, h]:.2f}, chance "
                     f"{scores.chance[role][l, h]:.2f})" + _others(len(cleared))
                     + _relabelled(cleared, scores, role) + ("." if gone else "") + gone)
    looked = " or ".join(HEAD_KINDS[r] for r in sample.roles)
    role, cleared, more = _first_cleared(scores, sample.closest, off)
    gone += more
    if cleared:
        l, h, s = cleared[0]
        return Guide(l, h, False, f"No {looked} head on this sample"
                     f"{', of the heads still on' if off else ''}; the closest: "
                     f"{head_title(l, h)}, {_a(HEAD_KINDS[role])} head (strength {H.strength_text(role, s, 2)}, score "
                     f"{scores.scores[role][l, h]:.2f}, chance {scores.chance[role][l, h]:.2f})."
                     + gone)
    first = sample.roles[0]
    # (the roles the unknown-token notice names are not labelled: the notice says so once)
    rest = [r for r in (*sample.roles[1:], *sample.closest) if not (scores.notice and r in H.IDENTITY_ROLES)]
    nor = (f" Nor does any{' still on' if off else ''} clear the "
           f"{' or '.join(H.TITLES[r] for r in rest)} bar.") if rest else ""
    l, h, _ = scores.candidate(first, off) or (None, None, None)
    return Guide(l, h, False, H.no_head_clears(scores, first, "this sample", skip=off) + nor + gone)


def switched_off(result) -> set:
    """The heads whose output `result`'s run replaced (zero- or mean-ablated): {(layer, head)}."""
    edits = getattr(getattr(result, "trace", None), "edits", None) or ()
    return {(e.layer, e.head) for e in edits if isinstance(e, ReplaceHead)}


def _first_cleared(scores, roles, off: set) -> tuple[str | None, list, str]:
    """The first of `roles` a head still on clears, with those heads (_on_and_off's), and the notes
    on the heads switched off of each role looked at: (role or None, heads, notes)."""
    gone = ""
    for role in roles:
        cleared, note = _on_and_off(scores, role, off)
        gone += note
        if cleared:
            return role, cleared, gone
    return None, [], gone


def _on_and_off(scores, role: str, off: set) -> tuple[list, str]:
    """The heads that clear `role`'s bar still on, strongest first [(layer, head, strength)], and
    the note on those switched off."""
    cleared = scores.cleared(role)
    return ([c for c in cleared if c[:2] not in off],
            _off_note([c[:2] for c in cleared if c[:2] in off], f"the {H.TITLES[role]} bar"))


def _off_note(heads: list, what: str) -> str:
    """' Switched off in this run: L18 H6, which clears the induction bar.' for `heads` [(layer,
    head)] that would be named but are switched off; '' for none."""
    if not heads:
        return ""
    names = [head_title(l, h) for l, h in heads[:3]] + ([f"{len(heads) - 3} more"] if len(heads) > 3 else [])
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f" Switched off in this run: {listed}, which {'clears' if len(heads) == 1 else 'clear'} {what}."


# each role as the words before "head": "an induction head", "a first-token sink head"
HEAD_KINDS = {"previous": "previous-token", "next": "next-token", "self": "self (current-token)",
              "sink": "first-token sink", "duplicate": "duplicate-token", "induction": "induction"}


def _a(word: str) -> str:
    return ("an " if word[0] in "aeiou" else "a ") + word


def _others(n: int) -> str:
    if n <= 1:
        return ""
    return "; 1 more head clears it" if n == 2 else f"; {n - 1} more heads clear it"


def _relabelled(cleared: list, scores, role: str) -> str:
    """The heads after the first that clear `role`'s bar but are labelled by a stronger role: the
    Head roles panel counts labels, and without these the two counts would seem to disagree."""
    other = [(l, h, scores.labels[l][h]) for l, h, _ in cleared[1:] if scores.labels[l][h] != role]
    if not other:
        return ""
    if len(other) == 1:
        l, h, label = other[0]
        return f" ({head_title(l, h)} is labelled {label}, its stronger role)"
    if len(other) > 3:
        return f" ({len(other)} of them labelled by their stronger roles)"
    return " (labelled by their stronger roles: " + ", ".join(
        f"{head_title(l, h)} {label}" for l, h, label in other) + ")"


def _signed(x: float, bar: float | None = None) -> str:
    """`+0.12`, `−0.12` (the minus the window's colour bars write), and `+0.00` for a value that
    rounds to zero (never `−0.00`); below a `bar`, as many more decimals as it takes not to read
    as the bar (0.0496 below 0.05: `+0.0496`, not `+0.05`)."""
    digits = 2
    while bar is not None and x < bar <= round(x, digits) and digits < 8:
        digits += 1
    text = f"{x:+.{digits}f}"
    return "+" + text[1:] if float(text) == 0 else text.replace("-", "\u2212")


def word_tokens(result, word: str) -> list[int]:
    """The positions of the tokens that make up the sample's `word` where the text has it as a
    whole word (not inside another: the 'it' of 'fit'), found by the tokens' character offsets; one
    position where the model reads the word as a token of its own. InputError where the text has
    the word other than once."""
    text = result.text or ""
    spans = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(word)}(?!\w)", text, re.IGNORECASE)]
    if len(spans) != 1:
        raise InputError(f"the sample's word {quoted(word)} is in its text {len(spans)} times, not once")
    a, b = spans[0]
    out = []
    for i, (s, e) in enumerate(result.offsets):
        s += len(text[s:e]) - len(text[s:e].lstrip())  # (a token's leading space is not the word's)
        if s < e and s < b and e > a:
            out.append(i)
    if not out:
        raise InputError(f"no token of this run covers the sample's word {quoted(word)}")
    return out


def _find_positions(sample: Sample, result) -> tuple[int, int]:
    """The query and key positions of a Find sample's two words: each the one token the model reads
    it as where the text has it whole, once (word_tokens). InputError, saying what the user can do,
    where the model splits a word into pieces (Find takes a piece), reads it inside a longer token,
    or does not know it (a token that does not spell it: <|unk|>). A word not in the text whole
    once (a token's label, `<E6 9D>`), or a run without offsets, goes by Find's own lookup."""
    frm, to = sample.find
    labels, raw = list(result.labels), list(getattr(result, "tokens", result.labels))
    offsets = getattr(result, "offsets", None)

    def spans(word):  # word_tokens' positions, or None where Find's lookup takes the word
        if not offsets or len(offsets) != len(labels):
            return None
        try:
            return word_tokens(result, word)
        except InputError:
            return None

    def reads(word, pos) -> tuple[str, bool]:
        """How the model reads `word` ("" where as one token of its own), and whether as a token
        that does not spell it."""
        if pos is None:
            return "", False
        if len(pos) > 1:
            return f"{quoted(word)} as {tokens(len(pos))} ({', '.join(f'{labels[i]}@{i}' for i in pos)})", False
        i = pos[0]
        if "".join(result.text[slice(*offsets[i])].split()).lower() != word.lower():
            return f"{quoted(word)} only within the token {labels[i]}@{i}", False
        if word.lower() not in (plain(labels[i]).lower(), plain(str(raw[i])).lower()):
            return f"{quoted(word)} as {labels[i]}@{i}, a token that does not spell it", True
        return "", False
    words = (frm, to)
    found = [spans(w) for w in words]
    said = [reads(w, f) for w, f in zip(words, found)]
    if any(x for x, _ in said):
        unknown = [w for w, (_, unk) in zip(words, said) if unk]
        if unknown:
            then = (f"No head can be ranked for a word the model does not know: open a model whose "
                    f"vocabulary has {' and '.join(map(quoted, unknown))}.")
        else:
            pick = [_pick(result, w, f) for w, f in zip(words, found)]
            then = (f"In Find (a tab of the Head roles panel), pick {pick[0]} as the query and {pick[1]} "
                    "as the key.")
        raise InputError(f"This sample looks for {quoted(frm)} → {quoted(to)}, one token to one token, "
                         f"but this model reads {' and '.join(x for x, _ in said if x)}. {then}")
    try:  # Find's own token lookup: a word the tokenizer splits, or says twice, is an InputError
        return tuple(f[0] if f is not None else resolve_token(result, w) for w, f in zip(words, found))
    except InputError as exc:  # (the sample's words, not the user's: say whose tokens miss them)
        raise InputError(f"This sample looks for {quoted(frm)} → {quoted(to)}, words this model "
                         f"does not read as one token each here: {exc}") from None


def _pick(result, word: str, pos: list[int] | None) -> str:
    """What to pick in Find for a sample's word: its token (`·it@23`), or a piece of it."""
    if pos is None:  # (not in the text whole: Find's own lookup, else the word as the sample says it)
        try:
            pos = [resolve_token(result, word)]
        except InputError:
            return quoted(word)
    return f"{result.labels[pos[0]]}@{pos[0]}" if len(pos) == 1 else f"a piece of {quoted(word)}"


def _guide_find(sample: Sample, result, off=frozenset()) -> Guide:
    q, k = _find_positions(sample, result)
    hits = find(result, q, k)
    frm, to = quoted(result.labels[q]), quoted(result.labels[k])  # the tokens as the strip labels them
    gone = _off_note([(x.layer, x.head) for x in hits if (x.layer, x.head) in off
                      and x.specificity >= SPECIFICITY_MIN], f"the bar for {frm} \u2192 {to}")
    hits = [x for x in hits if (x.layer, x.head) not in off]
    if not hits:
        return Guide(None, None, False, "Every head is switched off in this run.")
    top = hits[0]
    base = top.weight - top.specificity  # the other queries' mean weight on the key
    msg = (f"{head_title(top.layer, top.head)}: {frm} \u2192 {to} weight {top.weight:.2f}, "
           f"{_signed(top.specificity, SPECIFICITY_MIN)} against the other queries' mean {base:.2f}")
    if top.specificity >= SPECIFICITY_MIN:
        n = sum(1 for x in hits if x.specificity >= SPECIFICITY_MIN)
        return Guide(top.layer, top.head, True, msg + _others(n) + ("." if gone else "") + gone)
    none = f"No head{' still on' if off else ''} singles out {frm} \u2192 {to} here (by {SPECIFICITY_MIN:g} over the other queries)"
    if top.specificity < CLOSEST_MIN:
        return Guide(None, None, False, f"{none}, nor comes close (by {CLOSEST_MIN:g}): the most any head"
                     f"{' still on' if off else ''} gives {frm} \u2192 {to} over the other queries' mean is "
                     f"{_signed(top.specificity, CLOSEST_MIN)}." + gone)
    return Guide(top.layer, top.head, False, f"{none}. Closest: " + msg + "." + gone)


__all__ = ["SAMPLES", "Sample", "Guide", "guide", "sample_for_text", "SPECIFICITY_MIN", "CLOSEST_MIN"]
