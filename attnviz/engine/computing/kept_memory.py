"""What a Model keeps beside its layers for the session, named with its bytes for the memory line
(Model.memory): its embeddings where they are held in the process's memory (an F16 or BF16 file's
table converted to float32, a copy quantized in memory's tables), the unembedding's float32 copy
(logits.Unembedding, from the pass it starts keeping it on) or the model's own float32 table, the
unembedding packed for the kernels (logits.PackedUnembedding, once packed) and the W_O Grams
(Model.output_grams). An array over a memory-mapped file is the file's pages, which the system
reads in and lets go (engine/reading/budget.py leaves them out too), so it is not named; memory two
names share (an unembedding tied to the token embedding) is counted once."""

from __future__ import annotations

import numpy as np

from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.pages import owner
from attnviz.engine.reading.token_text import plural

EMBEDDINGS = ("token embedding", "position embedding", "token type embedding")



def _tables(weights, head) -> list[tuple[str, str, list]]:
    """(name, how it is held, its arrays) of each large array the model may keep beside its layers,
    embeddings first."""
    w_u = None if head is None else head.w_u
    file_head = weights.head.unembed if weights.head is not None else None
    pm = None if head is None or head.pack is None else head.pack.held
    found = list(zip(EMBEDDINGS, (weights.tok_emb, weights.pos_emb, weights.type_emb)))
    found += [("unembedding", file_head), ("unembedding", getattr(w_u, "kept", w_u))]  # (the table, its copy)
    out = []
    for name, t in found:
        if isinstance(t, np.ndarray):
            out.append((name, "as float32" if t.dtype == np.float32 else f"as {t.dtype}", [t]))
        elif isinstance(getattr(t, "data", None), np.ndarray) and hasattr(t, "qtype"):  # a QuantRows
            out.append((name, f"as {t.qtype.name}", [t.data]))
    if pm is not None:
        out.append(("unembedding", "packed for the kernels",
                    [a for _, p in pm.parts for a in (p.q, p.scale, p.offset) if a is not None]))
    return out


def kept_besides(weights, head, grams) -> list[str]:
    """What the model keeps beside its layers, one 'names how (bytes)' each way it is held, then
    its W_O Grams: `head` the model's LMHead if built (else None), `grams` (layers whose Grams are
    held, layers, their bytes), None where none were asked for (Model.output_grams)."""
    seen: dict[int, str] = {}  # id of an owning array -> the name it was counted under
    groups: dict[str, tuple[list, list]] = {}  # how -> (names, bytes)
    for name, how, arrays in _tables(weights, head):
        owners = [o for o in map(owner, arrays) if o is not None]
        new = {id(o): o for o in owners if id(o) not in seen}
        others = {seen[id(o)] for o in owners if id(o) in seen} - {name}
        if not new and not others:
            continue
        names, sizes = groups.setdefault(how, ([], []))
        label = name if new else f"tied {name}"
        if label not in names and name not in names:
            names.append(label)
        sizes.extend(o.nbytes for o in new.values())
        seen.update((i, name) for i in new)
    parts = [f"{_joined(names)} {how} ({format_bytes(sum(sizes))})" for how, (names, sizes) in groups.items()]
    if grams is not None and grams[0]:
        made, of, n_bytes = grams
        parts.append(f"W_O Grams for {made} of {plural(of, 'layer')} ({format_bytes(n_bytes)})")
    return parts


def _joined(names: list[str]) -> str:
    """['token embedding', 'position embedding', 'tied unembedding'] -> 'embeddings and tied
    unembedding'."""
    embeddings = [n for n in names if n in EMBEDDINGS]
    if len(embeddings) > 1:
        names = ["embeddings"] + [n for n in names if n not in EMBEDDINGS]
    return " and ".join(names)
