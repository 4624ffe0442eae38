"""The Calculator's notes, as plain sentences: a preset's note typeset (arrows, "≠", a minus or an
en dash for a spaced hyphen), a footer note made a sentence, and what Custom numbers keep from the
model they started from."""

from __future__ import annotations

import re
from dataclasses import fields

from attnviz.engine.calc import window_layers_text
from attnviz.engine.calc.inputs import Arch, CalcInputs

NOTE_LAYERS = 6  # a note lists a sliding window's layers up to this many, counts a longer list


def typeset(note: str) -> str:
    """A preset's note or source as the window writes it: its ASCII arrow and "!=" as "→" and "≠",
    and a spaced hyphen as a minus "−" in a formula, else an en dash (presets.json keeps them as the
    reference configs quote them). See _dash for which is which."""
    note = note.replace("->", "\u2192").replace("!=", "\u2260")
    clauses = note.split(";")
    return ";".join(_SPACED_HYPHEN.sub(lambda m: _dash(m, clause), clause) for clause in clauses)


_SPACED_HYPHEN = re.compile(r"(\S+) - (?=(\S+))")
_NUMBER = re.compile(r"\d+(\.\d+)?")
_NAME = re.compile(r"[A-Za-z]|[A-Za-z]\w*(_|\d)\w*")  # a letter, or a name like d_model, x1


def _dash(m: re.Match, clause: str) -> str:
    """A spaced hyphen between two operands (numbers, or names like "d" and "d_model") is a minus
    where one of them is a name ("d - 1") or the clause is a formula ("4 * 256 - 1 = 1023"); else
    it is an en dash: between words ("shorter - not verified", "128 - meaningless") or a range
    ("5 - 10")."""
    left, right = m.group(1), m.group(2)
    a, b = (t.strip("()[],.:") for t in (left, right))
    operands = all(_NUMBER.fullmatch(t) or _NAME.fullmatch(t) for t in (a, b))
    formula = any(op in clause for op in "=*/+\u00d7\u2260")
    minus = operands and (formula or _NAME.fullmatch(a) or _NAME.fullmatch(b))
    return left + (" \u2212 " if minus else " \u2013 ")


def as_sentence(note: str) -> str:
    """A footer note as a sentence of its own: a capital first letter and a full stop, unless it
    starts with a config key or a formula ("n_inner=null → 4*n_embd": a name keeps its case)."""
    note = note.strip()
    if not note:
        return note
    first = note.split(maxsplit=1)[0]
    if not any(c in first for c in "_=*()[]"):
        note = note[0].upper() + note[1:]
    return note if note.endswith((".", "!", "?")) else note + "."


def kept_text(base: str, inp: CalcInputs) -> str:
    """The inputs Custom numbers keep from the model they started from, which have no field here."""
    kept = [f"{name} {value:,}" for name, value in (("d_ff", inp.d_ff), ("vocab", inp.vocab_size),
                                                     ("max positions", inp.max_positions)) if value]
    if inp.sliding_window:
        on = window_layers_text(inp.sliding_window_layers, most=NOTE_LAYERS)
        kept.append(f"sliding window {inp.sliding_window:,} on {on}")
    if inp.mla is not None:
        m = inp.mla
        kept.append("MLA " + ", ".join(f"{f.name} {getattr(m, f.name):,}" for f in fields(m)
                                       if getattr(m, f.name) is not None))
    arch = [_arch_field(f.name, value) for f in fields(Arch)
            if (value := getattr(inp.arch, f.name)) != getattr(Arch(), f.name)]
    kept.append("architecture: " + (f"a Llama-style decoder's except {', '.join(arch)}" if arch else
                                    "a Llama-style decoder's (gated MLP, RMSNorm, untied output head)"))
    return f"Kept from {base}, with no field here: {'; '.join(kept)}."


def _arch_field(name: str, value) -> str:
    if isinstance(value, bool):
        return name if value else f"no {name}"
    return f"{name} {value:,}" if isinstance(value, int) else f"{name} {value}"


def dropped_text(made_on: str, shown: str) -> str:
    """The note for remembered Custom figures not shown: made on `made_on`, shown on `shown`."""
    return (f"The Custom figures you left were for {made_on}; showing {shown}, with your context, "
            "batch and KV dtype (the same fields on another model give other totals).")
