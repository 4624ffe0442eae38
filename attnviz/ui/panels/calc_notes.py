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
    reference configs quote them). See _minus for which is which."""
    words = note.replace("->", "\u2192").replace("!=", "\u2260").split(" ")
    for i in range(1, len(words) - 1):
        if words[i] == "-" and words[i - 1] and words[i + 1]:
            words[i] = "\u2212" if _minus(words[i - 2] if i > 1 else "", words[i - 1], words[i + 1],
                                          words[i + 2] if i + 2 < len(words) else "") else "\u2013"
    return " ".join(words)


_OPERATORS = "=*/+^\u00d7\u2260<>"
_NUMBER = re.compile(r"\d+(\.\d+)?")
_NAME = re.compile(r"[A-Za-z]|[A-Za-z]\w*_\w*")  # a letter, or a name like d_model (not Qwen2, h0)


def _minus(before: str, left: str, right: str, after: str) -> bool:
    """Whether "left - right" is a subtraction: both operands (numbers, or names like "d" and
    "d_model") and either one a name ("d - 1", "(n_head - 1)") or an operator next to them
    ("4 * 256 - 1 = 1023", "4*256 - 1"). Else an en dash: between words ("shorter - not verified",
    "Qwen2 - Qwen3"), two numbers alone, a range ("layers 5 - 10"), or two capital letters alone,
    names of things ("an A - B test"; "A - B = C" is a formula by its "=", "(T - W)" by its
    brackets)."""
    a, b = re.split(f"[{_OPERATORS}]", left)[-1], re.split(f"[{_OPERATORS}]", right)[0]
    a, b = a.strip("()[],.:;"), b.strip("()[],.:;")
    if not all(_NUMBER.fullmatch(t) or _NAME.fullmatch(t) for t in (a, b)):
        return False
    beside = (before[-1:] + left[:-1] + right[1:] + after[:1]).replace(".", "")
    if any(op in beside for op in _OPERATORS):
        return True
    if all(len(t) == 1 and t.isupper() for t in (a, b)):  # (names of things, unless bracketed)
        return left.startswith(("(", "[")) and right.endswith((")", "]"))
    return bool(_NAME.fullmatch(a) or _NAME.fullmatch(b))


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


RUN_NAMES = {"seq_len": "context", "batch": "batch", "kv_dtype": "KV dtype"}  # the run fields, as notes name them


def dropped_text(made_on: str, shown: str, restored=(), reset=()) -> str:
    """The note for remembered Custom figures not shown: made on `made_on`, shown on `shown`, with
    the run fields `restored` as saved, and those `reset` to the defaults (keys of RUN_NAMES)."""
    text = f"The Custom figures you left were for {made_on}; showing {shown}"
    if restored:
        text += (f", with your {_listed(restored)} (the same fields on another model give other "
                 "totals)")
    text += "."
    if reset:
        text += (f" Your saved {_listed(reset)} could not be used (unreadable or out of range): "
                 f"{'they show their' if len(reset) > 1 else 'it shows its'} default.")
    return text


def _listed(keys) -> str:  # "context, batch and KV dtype"
    names = [RUN_NAMES.get(key, key) for key in keys]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
