"""Probes: inputs built so that what a head should do on them is known in advance.

- The repeated-random probe: seeded random token ids repeated twice, on which duplicate-token and
  induction heads show (scored with heads.score_heads like a typed text).
- Syntactic and coreference probes: sentences built from templates, so the answer is known by
  construction and no parser or labelled data is needed.

- agreement: "The keys behind the cabinet are" / "The cabinets said the key is": the verb's row
  should weigh its subject's noun ("keys", "key") above the other noun (the attractor), which has the
  other number.
- coreference: "Mary met John because she": the pronoun's row should weigh its antecedent ("Mary")
  above the other name. Names and pronouns are unambiguous (one woman, one man).

Per item and head: d = A[query, target] - A[query, foil]; score = mean d over the items, accuracy =
share of items with d > 0. Position is balanced by construction: the two words stand at the same
token positions in every item of a probe, and the target is the farther of them in half the items
and the nearer in the other half, so a head that attends by position alone (the nearest noun, the
first name) is right in one half and wrong in the other: its score is ~0 and its accuracy ~0.5.
A head is labelled when score >= SCORE_MIN, accuracy >= ACCURACY_MIN and its score is positive
in both halves. Items whose key words are not single, known tokens in the model's tokenizer are
skipped and counted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from attnviz.engine.errors import Cancelled, InputError
from attnviz.engine.reading.token_text import plural
from attnviz.engine.computing.request import RunRequest

SCORE_MIN = 0.1
ACCURACY_MIN = 0.75
N_ITEMS = 60
SEED = 0

# the templates' words, (singular, plural)
NOUNS = [("key", "keys"), ("book", "books"), ("dog", "dogs"), ("car", "cars"), ("door", "doors"),
         ("bird", "birds"), ("girl", "girls"), ("boy", "boys"), ("cup", "cups"), ("letter", "letters"),
         ("painting", "paintings"), ("report", "reports"), ("song", "songs"), ("road", "roads")]
ATTRACTORS = [("cabinet", "cabinets"), ("table", "tables"), ("house", "houses"),
              ("garden", "gardens"), ("teacher", "teachers"), ("window", "windows"),
              ("farmer", "farmers"), ("river", "rivers"), ("doctor", "doctors"), ("box", "boxes")]
_PREPS = ["near", "behind", "beside", "under", "above", "beyond"]
_SAID = ["said", "knew", "thought", "hoped", "felt", "heard"]
VERBS = [("is", "are"), ("was", "were"), ("has", "have")]
WOMEN = ["Mary", "Anna", "Emma", "Sarah", "Lisa", "Julia", "Laura", "Kate", "Alice", "Helen"]
MEN = ["John", "Peter", "David", "Mark", "Paul", "James", "Tom", "Mike", "Robert", "George"]
_MEET = ["met", "called", "thanked", "visited", "helped", "phoned", "warned", "praised"]
_BECAUSE = ["because", "after", "when", "since"]

DEFINITIONS = {
    "agreement": (
        "Subject-verb agreement: d = A[verb, subject noun] - A[verb, attractor noun], the attractor "
        "having the other number. The subject is the farther noun in half the items ('The keys "
        "behind the cabinet are') and the nearer in the other half ('The cabinets said the key "
        "is'), the two nouns at the same positions in both. score = mean d over the items; "
        "accuracy = share of items with d > 0."),
    "coreference": (
        "Pronoun -> antecedent: d = A[pronoun, antecedent] - A[pronoun, other name] in 'Mary met "
        "John because she' (one woman, one man); the antecedent is the first name in half the items "
        "and the second in the other half. score = mean d over the items; accuracy = share of "
        "items with d > 0."),
}
LABEL_RULE = (f"A head is labelled when score >= {SCORE_MIN:g}, accuracy >= {ACCURACY_MIN:g} and its "
              "score is positive both where the target is the farther word and where it is the "
              "nearer (chance: 0, 0.5; a head that attends by position alone is right in one half "
              "only). Items whose key words are not single, known tokens are skipped and counted.")
KINDS = tuple(DEFINITIONS)


@dataclass(frozen=True)
class Item:
    text: str  # the probe sentence; its last word is the query
    query: str  # the word whose row is read (verb / pronoun)
    target: str  # what it should attend to (subject noun / antecedent)
    foil: str  # the competitor (attractor / other name)
    far: bool  # the target is the farther of the two from the query


def agreement_items(n: int = N_ITEMS, seed: int = SEED) -> list[Item]:
    """Half 'The {subject} {prep} the {attractor} {verb}' (the subject is the farther noun), half
    'The {attractor} {said} the {subject} {verb}' (the subject of the verb is the nearer noun): the two
    nouns stand at the same token positions in both halves, only their roles swap."""
    rng = np.random.default_rng(seed)
    items, seen = [], set()
    while len(items) < n:
        subj, attr = NOUNS[rng.integers(len(NOUNS))], ATTRACTORS[rng.integers(len(ATTRACTORS))]
        plural = bool(rng.integers(2))
        s, a = subj[int(plural)], attr[int(not plural)]
        verb = VERBS[rng.integers(len(VERBS))][int(plural)]
        far = len(items) % 2 == 0
        if far:
            head = f"The {s} {_PREPS[rng.integers(len(_PREPS))]} the {a}"
        else:
            head = f"The {a} {_SAID[rng.integers(len(_SAID))]} the {s}"
        if head in seen:
            continue
        seen.add(head)
        items.append(Item(f"{head} {verb}", verb, s, a, far))
    return items


def coreference_items(n: int = N_ITEMS, seed: int = SEED) -> list[Item]:
    """'{A} {met} {B} {because} {pronoun}', the antecedent A (farther) in half the items, B in the
    other half; a woman and a man in either order."""
    rng = np.random.default_rng(seed)
    items, seen = [], set()
    while len(items) < n:
        woman, man = WOMEN[rng.integers(len(WOMEN))], MEN[rng.integers(len(MEN))]
        a, b = (woman, man) if rng.integers(2) else (man, woman)
        far = len(items) % 2 == 0  # the antecedent is the first name (farther from the pronoun)
        target, foil = (a, b) if far else (b, a)
        pronoun = "she" if target == woman else "he"
        text = f"{a} {_MEET[rng.integers(len(_MEET))]} {b} {_BECAUSE[rng.integers(len(_BECAUSE))]} {pronoun}"
        if text in seen:
            continue
        seen.add(text)
        items.append(Item(text, pronoun, target, foil, far))
    return items


ITEMS = {"agreement": agreement_items, "coreference": coreference_items}


@dataclass
class TemplateScores:
    """Scores of every head on one probe: `score` and `accuracy` are [n_layer, n_head]."""

    kind: str
    score: np.ndarray
    accuracy: np.ndarray
    far: np.ndarray  # mean d over the items whose target is the farther word
    near: np.ndarray  # ... the nearer word: a positional head is positive in one half only
    n_items: int
    n_skipped: int
    examples: list = field(default_factory=list)

    def labelled(self):
        """Heads that pass both bars, best score first: [(layer, head, score, accuracy)]."""
        ok = (self.score >= SCORE_MIN) & (self.accuracy >= ACCURACY_MIN) & (self.far > 0) & (self.near > 0)
        hits = [(int(l), int(h), float(self.score[l, h]), float(self.accuracy[l, h]))
                for l, h in np.argwhere(ok)]
        return sorted(hits, key=lambda t: (-t[2], t[0], t[1]))

    def best(self):
        l, h = np.unravel_index(int(np.argmax(self.score)), self.score.shape)
        return int(l), int(h), float(self.score[l, h]), float(self.accuracy[l, h])

    def to_json(self):
        r = lambda a: np.round(a.astype(float), 6).tolist()  # noqa: E731
        return {"probe": self.kind, "definition": DEFINITIONS[self.kind], "label_rule": LABEL_RULE,
                "items": self.n_items, "skipped": self.n_skipped, "examples": self.examples,
                "score": r(self.score), "accuracy": r(self.accuracy), "far": r(self.far),
                "near": r(self.near),
                "labelled": [dict(zip(("layer", "head", "score", "accuracy"), t)) for t in self.labelled()]}


def _word_position(result, text: str, word: str, occurrence: int = 0) -> int | None:
    """The token that holds `word` (the occurrence-th time it stands as a whole word in `text`), or
    None when the word spans several tokens or none."""
    start = -1
    for _ in range(occurrence + 1):
        start = _find_word(text, word, start + 1)
        if start < 0:
            return None
    end = start + len(word)
    hit = [i for i, (a, b) in enumerate(result.offsets) if a < end and b > start and b > a]
    return hit[0] if len(hit) == 1 else None


def _find_word(text: str, word: str, frm: int) -> int:
    while True:
        i = text.find(word, frm)
        if i < 0:
            return -1
        before = text[i - 1] if i else " "
        after = text[i + len(word)] if i + len(word) < len(text) else " "
        if not before.isalnum() and not after.isalnum():
            return i
        frm = i + 1


def _diff(result, item, unknown) -> np.ndarray | None:  # -> [n_layer, n_head] or None (skip)
    q, t, f = (_word_position(result, item.text, w) for w in (item.query, item.target, item.foil))
    if q is None or t is None or f is None or len({q, t, f}) < 3:
        return None
    if unknown and any(int(result.input_ids[i]) in unknown for i in (q, t, f)):
        return None  # [UNK] stands for any word: it cannot be the word the probe asks about
    a = result.attentions
    return a[:, :, q, t] - a[:, :, q, f]


class ProbeProgress(NamedTuple):
    """How far run_template_probe is: `done` of `total` steps, and where it is in words. Its n
    sentences go through the layers together (a packed pass; more than one only when they do not
    fit one), then each is scored. A layer of a pass counts n steps (one per sentence whose rows
    it runs, in the usual one pass) and scoring a sentence one: total = n x (n_layer x passes + 1).
    `done` only grows, and equals `total` once the last sentence is scored."""
    done: int
    total: int
    words: str  # "12 of 30 layers run", "pass 2 of 3: 12 of 30 layers run", "17 of 60 sentences scored"


def _reporter(progress, n_layer: int, n: int):
    """-> (layers(done, total), scored(k)): Model.iter_many's layer counts and the sentences scored,
    told to `progress` as ProbeProgress."""
    at = [0, n_layer, 0]  # layers done, layers in all, sentences scored

    def tell(words):
        progress(ProbeProgress(at[0] * n + at[2], at[1] * n + n, words))

    def layers(done, total):
        at[0], at[1] = done, max(total, n_layer)
        passes = at[1] // n_layer
        p = max(1, -(-done // n_layer))  # the pass at work (or just ended)
        words = f"{done - (p - 1) * n_layer} of {plural(n_layer, 'layer')} run"
        tell(words if passes == 1 else f"pass {p} of {passes}: {words}")

    def scored(k):
        at[2] = k
        tell(f"{k} of {n} sentences scored")
    return layers, scored


def run_template_probe(model, kind: str, n: int = N_ITEMS, seed: int = SEED,
                       progress=None, stop=None) -> TemplateScores:
    """Run one probe's items through `model` and score every head. `progress(ProbeProgress)` is
    called once the items are packed, after each layer of a pass and after each item is scored
    (the window's progress); `stop()` is asked before each layer of a pass and after each item:
    once True, Cancelled. The items do not depend on anything but `n` and `seed`, so a caller may
    wait inside stop() (give way to other work) and get the same scores."""
    from attnviz.engine.analysing.heads import unknown_token_ids

    if kind not in ITEMS:
        raise InputError(f"no probe {kind!r}; probes are {', '.join(KINDS)} (and repeat)")
    if model.tokenizer is None:
        raise InputError(f"the {kind} probe needs words; {model.name} has no tokenizer")
    if n < 2:
        raise InputError(f"the probe needs at least 2 items, got {n}")
    unknown = unknown_token_ids(model)
    items = list(ITEMS[kind](n, seed))
    layers, scored = (None, None) if progress is None else _reporter(progress, model.config.n_layer, n)
    # the items' rows go through the weights together (Model.iter_many: a few passes over the
    # weights instead of one per item; benchmarks/scan.py measures the packed passes)
    per_item = {}
    texts = [item.text for item in items]
    for done, (j, result) in enumerate(model.iter_many(texts, stop=stop, progress=layers), start=1):
        if isinstance(result, BaseException):
            raise result  # (as run would)
        per_item[j] = _diff(result, items[j], unknown)
        if scored is not None:
            scored(done)
        if stop is not None and stop():
            raise Cancelled(f"the {kind} probe stopped after {done} of {n} items: cancelled")
    diffs, far, examples = [], [], []
    skipped = 0
    for i, item in enumerate(items):
        d = per_item[i]
        if d is None:
            skipped += 1
            continue
        diffs.append(d)
        far.append(item.far)
        if len(examples) < 4:
            examples.append(item.text)
    far = np.array(far, dtype=bool)
    if far.all() or not far.any():
        raise InputError(f"too few {kind} items are single, known tokens in {model.name}'s "
                         f"tokenizer ({len(diffs)} of {n}): no balanced score")
    d = np.stack(diffs)  # [n_items, n_layer, n_head]
    return TemplateScores(kind=kind, score=d.mean(axis=0), accuracy=(d > 0).mean(axis=0),
                          far=d[far].mean(axis=0), near=d[~far].mean(axis=0), n_items=len(diffs),
                          n_skipped=skipped, examples=examples)


def score_probe(model, kind: str, exclude_bos: bool = False, exclude_current_token: bool = False,
                probe=None, progress=None, stop=None):
    """The head scores of one probe source, as the roles panel's runner job computes them: (scores,
    probe). kind "probe": the seeded random probe repeated twice (run_probe), scored as a typed
    text is, with the exclusion options; `probe`, its (RunResult, note) from an earlier call on this
    model and seed, is reused, and the one used comes back for the caller's cache. A template kind
    (KINDS): run_template_probe's TemplateScores (the exclusion options do not apply; `progress`
    hears its ProbeProgress), probe None. `stop()`: asked between layers and items
    (run_template_probe), or the random probe's layers and roles; once True, Cancelled."""
    from attnviz.engine.analysing import heads as H

    if kind in KINDS:
        return run_template_probe(model, kind, progress=progress, stop=stop), None
    if kind != "probe":
        raise InputError(f"no probe {kind!r}; probes are {', '.join(KINDS)} and probe")
    probe = probe or run_probe(model, stop=stop)
    scores = H.score_result(probe[0], exclude_bos=exclude_bos, exclude_current_token=exclude_current_token,
                            unknown_ids=H.unknown_token_ids(model), stop=stop)
    return scores, probe


# ---------------------------------------------------------------- the repeated-random probe

PROBE_LENGTH = 25
PROBE_SEED = 0
PROBE_NOTE = ("Probe: {n} token ids drawn at random (seed {seed}, without repeats when the vocabulary "
              "allows) from the model's vocabulary, leaving out special tokens and bracketed "
              "placeholders such as [unused5] or <0x0A>; the sequence is repeated twice and framed "
              "with the special tokens the tokenizer adds to any text ({frame}).")

_PLACEHOLDER = re.compile(r"^(\[.*\]|<.*>)$")


def _tokenizer(model):
    """The model's own tokenizer (loaded once with the model, padding and truncation off)."""
    if model.tokenizer is None:
        raise InputError(f"the probe needs the model's tokenizer.json; {model.name} has none")
    return model.tokenizer.raw


def _special_ids(model):
    ids = model.tokenizer.special_ids()
    raw = getattr(model.config, "raw", {}) or {}
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id",
                "sep_token_id", "cls_token_id", "mask_token_id", "decoder_start_token_id"):
        v = raw.get(key)
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, int):
                ids.add(x)
    return ids


def probe_frame(model):
    """(prefix ids, suffix ids): the special tokens the tokenizer puts around any text."""
    tok = _tokenizer(model)
    enc = tok.encode("a", add_special_tokens=True)
    mask = list(enc.special_tokens_mask)
    body = [i for i, m in enumerate(mask) if not m]
    if not body:
        return [], []
    return list(enc.ids[: body[0]]), list(enc.ids[body[-1] + 1:])


def probe_ids(model, n=PROBE_LENGTH, seed=PROBE_SEED):
    """Random sequence repeated twice, framed like text: ([T] ids, note). Shortened to fit."""
    tok = _tokenizer(model)
    prefix, suffix = probe_frame(model)
    room = (int(model.config.max_positions) - len(prefix) - len(suffix)) // 2
    if room < 2:
        raise InputError(f"model has {plural(model.config.max_positions, 'position')}: too few for a probe")
    n = max(2, min(int(n), room))
    special = _special_ids(model)
    size = min(int(model.config.vocab_size), tok.get_vocab_size(with_added_tokens=True))
    pool = []
    for i in range(size):
        s = tok.id_to_token(i)
        if i in special or s is None or _PLACEHOLDER.match(s):
            continue
        pool.append(i)
    if len(pool) < 2:
        raise InputError(f"only {plural(len(pool), 'ordinary token')} in this vocabulary: cannot build a probe")
    rng = np.random.default_rng(seed)
    seq = rng.choice(np.array(pool), size=n, replace=len(pool) < n).tolist()
    ids = prefix + seq + seq + suffix
    frame = " ... ".join(
        filter(None, [" ".join(tok.id_to_token(i) for i in prefix),
                      " ".join(tok.id_to_token(i) for i in suffix)])) or "none"
    note = PROBE_NOTE.format(n=n, seed=seed, frame=frame)
    return [int(i) for i in ids], note


def run_probe(model, n=PROBE_LENGTH, seed=PROBE_SEED, stop=None):
    """Run the probe through the model: (RunResult, note). `stop`: RunRequest.stop."""
    ids, note = probe_ids(model, n=n, seed=seed)
    # (use_cache=False leaves the typed sentence's KV cache alone)
    return model.run(ids=ids, request=RunRequest(use_cache=False, stop=stop)), note
