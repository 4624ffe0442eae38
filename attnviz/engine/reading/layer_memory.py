"""Which memory a layer's float32 matrices lie in (pages.owner), and giving back the pages of a
buffer a lowered budget leaves (budget.py, LayerStore.set_budget): the load's one buffer of the
kept layers (_Arena), when the budget no longer keeps every layer in it.

A lowered budget copies the layers it keeps out of that buffer, so the buffer goes once no run
holds it. Until then memory would hold the whole buffer and the copies together; so the pages of
each layer's part of it go back to the system as soon as nothing can read them: a layer leaving
the set at once, a kept one as its copy takes its place. Nothing can read them where no array
but the layers' own matrices views the buffer and nothing but the store holds the layer or its
matrices (a run in flight, an analysis holding a slice: their references count them). Where a
run holds a layer or one of its matrices, that layer's pages stay until the buffer goes; where any
other array views the buffer (a slice, a memoryview), none of its pages go back until then."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from attnviz.engine.reading.pages import MADV_DONTNEED, madvise, owner


def matrices(layer) -> list[tuple[str, np.ndarray]]:
    """(field, the array its memory lies in: pages.owner) of each float32 matrix of a layer held
    in the process's memory (the arrays an _Arena packs), not in a file's mapped pages."""
    out = []
    for f in dataclasses.fields(layer):
        a = getattr(layer, f.name)
        if isinstance(a, np.ndarray) and a.ndim == 2 and a.dtype == np.float32:
            o = owner(a)
            if o is not None:
                out.append((f.name, o))
    return out


def owner_ids(layer) -> set[int]:
    """Ids of the arrays a layer's float32 matrices lie in (matrices)."""
    return {id(o) for _, o in matrices(layer)}


def shared_owners(layers: dict, keep) -> set[int]:
    """Ids of the arrays (pages.owner) that hold matrices of more than one of `layers` (i ->
    layer), one of them a layer not in `keep`: a buffer a lowered budget must empty to give back."""
    holders: dict[int, set[int]] = {}  # id of an owning array -> layers in it
    for i, layer in layers.items():
        for o in owner_ids(layer):
            holders.setdefault(o, set()).add(i)
    return {o for o, held in holders.items() if len(held) > 1 and not held <= keep}


def lies_in(layer, owners: set[int]) -> bool:
    """Whether a matrix of `layer` lies in one of `owners` (ids of owning arrays)."""
    return not owner_ids(layer).isdisjoint(owners)


def copied_out(layer, owners: set[int]):
    """`layer` with each matrix that lies in one of `owners` copied out of it (order K: a
    transposed slot stays transposed), or None where none does."""
    moved = {name: getattr(layer, name).copy(order="K") for name, o in matrices(layer) if id(o) in owners}
    return dataclasses.replace(layer, **moved) if moved else None


def give_back(old: list, known: list, owners: set[int]) -> int:
    """Give the pages of each layer popped from `old` (layers the store let go of or replaced,
    which this list alone holds) in the buffers `owners` back to the system, where nothing can read
    them (module docstring): nothing but the list holds the layer, nothing but the layer a matrix
    of it, and no array but the matrices of `old` and `known` (the layers the store holds now)
    views that buffer. -> bytes given back; `old` is emptied either way. (Reference counts are
    read in this one frame, each object held by one local name as it is read.)"""
    if not getattr(sys, "_is_gil_enabled", lambda: True)():  # (counts read without the GIL may be stale)
        old.clear()
        return 0
    probe = object()
    alone = sys.getrefcount(probe)  # (a value one local name holds, as this interpreter counts it)
    views: dict[int, int] = {}  # id of a buffer -> its views among the layers' matrices
    sample: dict[int, np.ndarray] = {}  # id of a buffer -> one of those views (it holds the buffer)
    seen: set[int] = set()
    for layer in (*old, *known):
        for f in dataclasses.fields(layer):
            a = getattr(layer, f.name)
            o = owner(a) if isinstance(a, np.ndarray) else None
            if o is not None and id(o) in owners and id(a) not in seen:
                seen.add(id(a))
                views[id(o)] = views.get(id(o), 0) + 1
                sample[id(o)] = a
    layer = a = o = f = None
    free: set[int] = set()
    for i in sample:
        o = owner(sample[i])
        if sys.getrefcount(o) == views[i] + alone:  # (each view's base, and `o`)
            free.add(i)
        o = None
    sample.clear()
    given = 0
    while old:
        layer = old.pop()
        if sys.getrefcount(layer) == alone:  # (`layer` alone: no run holds it)
            given += _pages(layer, free, alone)
        layer = None
    return given


def _pages(layer, free: set[int], alone: int) -> int:
    """Give back the whole pages of `layer`'s matrices lying in the buffers `free` where nothing
    but the layer holds any of them (a run in flight holding one: none) -> bytes given back."""
    arrays = [getattr(layer, name) for name, o in matrices(layer) if id(o) in free]
    for k in range(len(arrays)):
        a = arrays[k]
        if sys.getrefcount(a) != alone + 2:  # (`a`, and the layer and `arrays`)
            return 0
    a = None
    given = 0
    for a in arrays:
        if madvise(a if a.flags.c_contiguous else a.T, MADV_DONTNEED):
            given += a.nbytes
    return given
