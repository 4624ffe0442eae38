"""A memory budget for a model's expanded (float32) layers.

A file keeps each layer's matrices in their own type (GGUF's quantised blocks, F16/BF16
safetensors), memory-mapped. A layer runs as float32: `LayerStore` expands it when it is asked for
and keeps as many expanded layers as the budget allows. A model whose layers all fit keeps every
one, expanded at load, as before; a bigger one keeps some and expands the others each time they
run. The results are the same either way: a layer is expanded by the same code into the same
layout, whatever the budget (tests/engine/test_budget.py).

Which layers stay: a forward pass visits every layer in order, every run. A least-recently-used
set smaller than the model would then drop each layer just before it is needed again and keep
none for the next run. So the store keeps a fixed set (the last layers: a run resumed from a layer,
as ablation does, runs the layers after it) and passes the others through what is left of the
budget, least recently used first out.

The budget is the model's float32 layers only: the file's pages (the page cache, counted in RSS as
they are read), the KV cache and the run's activations come on top.

A GGUF model whose layers are packed for the quantised kernels (engine/reading/qpack.py) also has
a packed view of each layer (`packed_view`): its packed matrices in the file's blocks, no float32
copy of them, and its vectors (and any matrix of a type without a kernel) as float32. The views are
held for the model's life beside the budget; a layer is expanded only when something asks for
its float32 matrices (a run of many rows, an analysis that reads a whole matrix), through the
budget as above.

How large the budget is (parsed, chosen for the process, resolved for a model at load):
memory_budget.py.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Callable

import numpy as np

from attnviz.engine.errors import InputError
from attnviz.engine.reading.byte_sizes import format_bytes
from attnviz.engine.reading.layer_memory import copied_out, give_back, lies_in, owner_ids, shared_owners
from attnviz.engine.reading.token_text import plural
from attnviz.engine.reading.pages import (
    MADV_DONTNEED, PAGE, huge_pages, madvise, no_huge_pages, populate_pages,
)

HUGE_PAGE = 2 << 20  # bytes: the arena starts on a boundary of Linux's transparent huge pages
ARENA_MIN = 4 << 20  # NumPy advises huge pages for arrays from 4 MiB on: smaller models keep their arrays


class _Arena:
    """One float32 buffer for the matrices of the layers kept at load, each a view into it, in the
    layout it came in (a C-order array, or the transposed view of one: the same products, bit for
    bit). One buffer of huge pages (NumPy advises them for a buffer this large) instead of a few
    hundred arrays of 4 KiB pages: a keystroke's products miss the TLB far less
    (benchmarks/row_products.py measures them). The layers are packed one at a time as they
    are expanded, so memory holds one layer's arrays twice at most."""

    def __init__(self, n_bytes: int, populate: bool = False):
        raw = np.empty(n_bytes // 4 + HUGE_PAGE // 4, np.float32)
        start = (-raw.ctypes.data % HUGE_PAGE) // 4
        self._buf = raw[start:start + n_bytes // 4]
        if not huge_pages():  # (before its first touch: small pages asked for, pages.py)
            no_huge_pages(raw)
        self.n_bytes = n_bytes
        self._pos = 0
        self._populating = None
        if populate:  # its pages faulted in on a thread of their own while the loader does other work
            self._populating = threading.Thread(target=populate_pages, args=(self._buf,),
                                                name="attnviz-arena-pages", daemon=True)
            self._populating.start()

    def settle(self) -> None:
        """Wait for the thread that faults in its pages, if any (their contents are not touched:
        writing to the buffer meanwhile is safe)."""
        if self._populating is not None:
            self._populating.join()
            self._populating = None

    def release_rest(self) -> bool:
        """Give the whole pages of the buffer that no slot has taken back to the system (a buffer
        prepared larger than what was put in it: its pages were faulted in); False where none is
        given back."""
        rest = self._buf[self._pos:]
        return rest.nbytes >= 2 * PAGE and madvise(rest, MADV_DONTNEED)

    def _take(self, shape: tuple, dtype=np.float32) -> np.ndarray | None:
        dtype = np.dtype(dtype)
        n_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        n = -(-n_bytes // 4)  # float32 elements of the buffer it takes
        if self._pos + n > self._buf.size:
            return None
        view = self._buf[self._pos:self._pos + n]
        if dtype != np.float32:
            view = view.view(np.uint8)[:n_bytes].view(dtype)
        self._pos = -(-(self._pos + n) // 16) * 16  # the next one on a 64-byte line
        return view.reshape(shape)

    def holds(self, a: np.ndarray) -> bool:
        """Whether array `a` lies in this arena's buffer (a slot given out by float32_array)."""
        lo = self._buf.ctypes.data
        return lo <= a.ctypes.data < lo + self._buf.nbytes

    def pack(self, layer):
        """The layer (a dataclass) with each float32 matrix moved into the arena, same layout (one
        already in it, written there by its build, stays)."""
        moved = {}
        for f in dataclasses.fields(layer):
            a = getattr(layer, f.name)
            if not (isinstance(a, np.ndarray) and a.ndim == 2 and a.dtype == np.float32):
                continue
            base = a if a.flags.c_contiguous else a.T if a.T.flags.c_contiguous else None
            if base is not None and self.holds(base):
                continue
            slot = None if base is None else self._take(base.shape)
            if slot is None:
                continue
            np.copyto(slot, base)
            moved[f.name] = slot if base is a else slot.T
        return dataclasses.replace(layer, **moved) if moved else layer


VIEW_SLACK = 64 * 3 * 16  # bytes a layer's packed arrays may add to their size (each starts on 64 bytes)


# .arena: the _Arena a layer being built on this thread fills, or None; .packed: the one a packed
# view's blocks and scales go to, or None
_BUILDING = threading.local()


def float32_array(shape: tuple) -> np.ndarray:
    """An uninitialised float32 C-order array for a matrix of the layer being built on this thread:
    a slot of the load's arena when it is filling one (the layer's values are then written where
    they stay: no second array, no copy, no second round of page faults), else a new array."""
    arena = getattr(_BUILDING, "arena", None)
    slot = arena._take(tuple(int(n) for n in shape)) if arena is not None else None
    return slot if slot is not None else np.empty(shape, dtype=np.float32)


def arena_array(shape: tuple, dtype) -> np.ndarray:
    """An uninitialised C-order array for a packed matrix's blocks or scales (qpack) of the view
    being built on this thread: a slot of the buffer read_views fills, else a new array."""
    arena = getattr(_BUILDING, "packed", None)
    slot = arena._take(tuple(int(n) for n in shape), dtype) if arena is not None else None
    return slot if slot is not None else np.empty(shape, dtype=dtype)


def _array_bytes(layer) -> int:
    """Bytes of a layer's arrays (tuples of them too), not its packed matrices; 0 for None."""
    n = 0
    for f in dataclasses.fields(layer) if layer is not None else ():
        value = getattr(layer, f.name)
        n += sum(a.nbytes for a in (value if isinstance(value, tuple) else (value,)) if isinstance(a, np.ndarray))
    return n


def _layer_bytes(layer) -> int:
    """Bytes of a layer's arrays (tuples of them too) and of its packed matrices."""
    n = 0
    for f in dataclasses.fields(layer):
        value = getattr(layer, f.name)
        for a in value if isinstance(value, tuple) else (value,):
            n += int(getattr(a, "nbytes", 0))
    return n


class LayerStore(Sequence):
    """A model's layers, expanded to float32 on demand within a memory budget (module docstring).

    `build(i, check)` expands layer i from the file (`check`: scan its values for NaN or Inf, done
    the first time only; a store with packed views passes layer i's too, `build(i, check, view)`,
    so no build refers to its store: a store let go is freed at once, not by the cyclic collector,
    which never walks one frozen with the window's start-up); `sizes[i]` are its float32 bytes.
    Indexing returns the expanded layer; safe across threads (two threads asking for a layer that
    is not held may both expand it)."""

    def __init__(self, build: Callable, sizes: Sequence[int], budget: int | None, source: str,
                 output: Callable | None = None, packed: Callable | None = None,
                 packed_bytes: int = 0):
        self._build, self.sizes, self.source = build, tuple(int(s) for s in sizes), source
        self._build_output = output  # (i, check) -> (w_o, b_o) read alone, or None: the whole layer
        # (i, check) -> layer i's packed view (module docstring), or None where nothing is packed;
        # None: the store has no packed views
        self._build_view = packed
        self._views: dict = {}  # i -> its packed view (or None), held for the model's life
        self._lock = threading.Lock()
        self._checked: set[int] = set()
        self._kept: dict = {}  # i -> layer: the fixed set
        self._passing: OrderedDict = OrderedDict()  # i -> layer: the others, oldest use first
        self.expansions = 0  # layers expanded so far (a count for benchmarks and the status line)
        self._arena: _Arena | None = None  # while expand_kept packs the kept layers' matrices
        self._ready: _Arena | None = None  # prepare_kept's, until expand_kept takes it
        self.packed_bytes = int(packed_bytes)  # what the views' packed matrices take (qpack.packed_nbytes)
        self._ready_views: _Arena | None = None  # prepare_kept's for the views, until read_views
        self._views_arena: _Arena | None = None  # while read_views builds the views
        self._family = weakref.WeakSet([self])  # the stores sharing its arrays (shared), itself too
        self.set_budget(budget)

    def set_budget(self, budget: int | None) -> None:
        """Choose the fixed set for `budget` bytes (None: every layer) and drop what no longer fits;
        layers newly in the set are expanded when next asked for."""
        total = sum(self.sizes)
        if budget is not None and budget < max(self.sizes, default=0):
            raise InputError(f"For {self.source}, a memory budget of {format_bytes(budget, 'down')} is less "
                             f"than one layer expanded to float32 ({format_bytes(max(self.sizes), 'up')})")
        if budget is None or budget >= total:
            keep = set(range(len(self.sizes)))
        else:  # the last layers, leaving room for the largest other layer to pass through
            keep, used, slot = set(), 0, max(self.sizes)
            for i in reversed(range(len(self.sizes))):
                if used + self.sizes[i] + slot > budget:
                    break
                keep.add(i)
                used += self.sizes[i]
        with self._lock:
            self.budget = budget
            self._keep = frozenset(keep)
            old = {**self._passing, **self._kept}
            self._kept = {i: old[i] for i in keep if i in old}
            self._passing = OrderedDict()
            self._room = (budget - sum(self.sizes[i] for i in keep)) if budget is not None else 0
            shared = shared_owners(old, keep) if set(old) - keep else set()
            for i in sorted(old):  # layers that leave the set may stay in the passing room
                if i not in keep and not lies_in(old[i], shared):
                    self._pass(i, old[i])
            leaving = [old.pop(i) for i in sorted(old) if i not in keep and lies_in(old[i], shared)]
        old = None  # (leaving alone holds the layers let go: layer_memory.give_back)
        if shared:
            self._leave_arena(shared, leaving)

    def _leave_arena(self, shared: set[int], leaving: list) -> None:
        """The kept layers' matrices that lie in an owner of `shared` (the load's _Arena, holding
        the layers `leaving` the set: set_budget let those go rather than copy them into the
        passing room) copied out of it, so that buffer goes once no run holds it, its pages given
        back layer by layer meanwhile (layer_memory.give_back): the leaving layers' first, then
        each kept layer's as its copy takes its place, so memory holds the kept layers and one
        copy more at most, where no run holds the old ones. A buffer another store sharing this
        one's arrays (shared) holds layers in stays anyway: its kept layers stay views of it."""
        shared = shared - self._held_elsewhere()
        with self._lock:
            kept = {i: layer for i, layer in self._kept.items() if lies_in(layer, shared)}
        give_back(leaving, self._layers_held(), shared)
        for i in sorted(kept):
            was = [kept.pop(i)]  # (the one holder of the old layer here: give_back reads its count)
            layer_now = copied_out(was[0], shared)
            with self._lock:  # (unless the budget changed again meanwhile)
                if layer_now is not None and self._kept.get(i) is was[0]:
                    self._kept[i] = layer_now
            if layer_now is not None:
                give_back(was, self._layers_held(), shared)
            layer_now = None

    def _layers_held(self) -> list:
        with self._lock:
            return [*self._kept.values(), *self._passing.values()]

    def _held_elsewhere(self) -> set[int]:
        """Ids of the buffers the layers of the stores sharing this one's arrays (shared) lie in."""
        held: set[int] = set()
        for other in list(self._family):
            if other is not self:
                for layer in other._layers_held():
                    held |= owner_ids(layer)
        return held

    def _pass(self, i: int, layer) -> None:  # under _lock: hold layer i in the room, oldest out
        self._passing[i] = layer
        used = sum(self.sizes[j] for j in self._passing)
        while used > self._room and len(self._passing) > 1:
            j, _ = self._passing.popitem(last=False)
            used -= self.sizes[j]
        if used > self._room:  # the room holds no layer at all: this one runs and goes
            self._passing.clear()

    def _make_room(self, size: int) -> None:  # under _lock: drop passing layers, oldest first
        used = sum(self.sizes[j] for j in self._passing)
        while self._passing and used + size > self._room:
            j, _ = self._passing.popitem(last=False)
            used -= self.sizes[j]

    def expand_kept(self) -> None:
        """Expand every layer of the fixed set now (at load: their files are checked then), their
        matrices packed into one buffer (_Arena) where that is large enough for huge pages. A layer
        with a packed view is left in its blocks: its float32 copy is made when asked for."""
        todo = [i for i in sorted(self._keep) if i not in self._kept and self.packed_view(i) is None]
        need = sum(self.sizes[i] for i in todo)
        ready, self._ready = self._ready, None
        if ready is not None and ready.n_bytes != need:
            ready.settle()
            ready = None
        self._arena = ready or (_Arena(need) if need >= ARENA_MIN else None)
        try:
            for i in todo:
                self[i]
        finally:
            if self._arena is not None:
                self._arena.settle()
            self._arena = None  # (the packed layers' views keep the buffer)

    def prepare_kept(self) -> None:
        """Make the buffer expand_kept will fill now and fault in its pages on a thread of their
        own (populate_pages), for a loader that has other work to do before it expands the layers
        (building the tokenizer). Nothing where the store has packed views (their layers are not
        expanded at load) or the layers are too small for the buffer. The values expand_kept
        writes are the same either way."""
        if self._ready is not None or self._ready_views is not None:
            return
        if self._build_view is not None:  # the views' packed matrices instead
            need = self.packed_bytes + VIEW_SLACK * len(self) if self.packed_bytes else 0
            if need >= ARENA_MIN and not self._views:
                self._ready_views = _Arena(need, populate=True)
            return
        need = sum(self.sizes[i] for i in self._keep if i not in self._kept)
        if need >= ARENA_MIN:
            self._ready = _Arena(need, populate=True)

    def drop_prepared(self) -> None:
        """Let go of what prepare_kept made (a load that failed before expanding): its thread
        joined."""
        for ready in (self._ready, self._ready_views):
            if ready is not None:
                ready.settle()
        self._ready = self._ready_views = None

    def read_views(self) -> None:
        """Build every layer's packed view now (at load: the file's blocks are checked then), their
        packed matrices in the buffer prepare_kept made, if it did."""
        self._views_arena, self._ready_views = self._ready_views, None
        try:
            for i in range(len(self)):
                self.packed_view(i)
        finally:
            if self._views_arena is not None:
                self._views_arena.settle()
                self._views_arena.release_rest()
            self._views_arena = None  # (the views keep the buffer)

    def shared(self) -> LayerStore:
        """A store of its own over the same file, holding the same read-only arrays a load holds
        (the packed views, and the fixed set's float32 layers that have none), as this one holds
        them now: a second model of the file built without reading it again. Its budget, room,
        counts and any layer it expands later are its own."""
        other = LayerStore(self._build, self.sizes, self.budget, self.source, self._build_output,
                           self._build_view, self.packed_bytes)
        other._take_held(self)
        return other

    def _take_held(self, source: LayerStore) -> None:  # (shared's: a new store, not yet used)
        self._family = source._family
        self._family.add(self)
        with source._lock:
            views, kept, checked = dict(source._views), dict(source._kept), set(source._checked)
        with self._lock:
            self._views = views
            self._kept = {i: layer for i, layer in kept.items()
                          if i in self._keep and views.get(i) is None}
            self._checked = checked

    def packed_view(self, i: int):
        """Layer i with its packed matrices in the file's blocks and no float32 copy of them
        (layout.Layer: those fields None, `packed` set), built once and held; None where the
        store has no views or nothing of layer i is packed."""
        if self._build_view is None:
            return None
        if i in self._views:
            return self._views[i]
        _BUILDING.packed = self._views_arena  # qpack's arena_array() takes the packed arrays from it
        try:
            view = self._build_view(i, True)  # (built once: its values are checked then)
        finally:
            _BUILDING.packed = None
        with self._lock:
            return self._views.setdefault(i, view)

    def let_go(self) -> None:
        """Drop every float32 layer held, the fixed set's and the passing room's: each is expanded
        again from the file when next asked for, within the budget as it is (a run holding one
        keeps it until it ends)."""
        with self._lock:
            self._kept, self._passing = {}, OrderedDict()

    def holds(self, i: int) -> bool:
        """Whether layer i's float32 copy is held now (asking for it then expands nothing)."""
        with self._lock:
            return i in self._kept or i in self._passing

    def view_bytes(self) -> int:
        """Bytes the packed views hold: the blocks as the kernels read them, and the float32 vectors
        and matrices without a kernel beside them (0: no views)."""
        with self._lock:
            views = [v for v in self._views.values() if v is not None]
        return sum(_layer_bytes(v) for v in views)

    def copy_bytes(self) -> tuple[int, int]:
        """(bytes the float32 copies held now add to their packed views, what every layer's copy
        would add): a copy shares its view's float32 vectors and matrices without a kernel
        (gguf_model._expanded), which view_bytes counts."""
        with self._lock:
            views, held = dict(self._views), (*self._kept, *self._passing)
        own = [size - _array_bytes(views.get(i)) for i, size in enumerate(self.sizes)]
        return sum(own[i] for i in held), sum(own)

    def output(self, i: int):
        """Layer i's w_o [n_head d_head, d_model], b_o and post_attn_norm (or None): the held
        layer's, else read alone from the file when the loader can (a tenth of a layer; not kept),
        else the layer's. The same arrays, bit for bit, as the expanded layer holds."""
        layer = self._kept.get(i)
        if layer is None:
            with self._lock:
                layer = self._passing.get(i)
        if layer is None and self._build_output is not None:
            return self._build_output(i, i not in self._checked)
        layer = layer if layer is not None else self[i]
        return layer.w_o, layer.b_o, layer.post_attn_norm

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        layer = self._kept.get(i)
        if layer is not None:
            return layer
        if not -len(self) <= i < len(self):
            raise IndexError(f"layer {i} of {len(self)}")
        i %= len(self)
        with self._lock:
            layer = self._kept.get(i) or self._passing.get(i)
            if layer is not None and i in self._passing:
                self._passing.move_to_end(i)
            if layer is None and i not in self._keep:  # room first: held + this one <= budget
                self._make_room(self.sizes[i])
        if layer is not None:
            return layer
        arena = self._arena if i in self._keep else None
        _BUILDING.arena = arena  # the build's float32_array() takes its matrices from it
        try:
            view = (self.packed_view(i),) if self._build_view is not None else ()  # (the build's to expand)
            layer = self._build(i, i not in self._checked, *view)  # outside the lock: a run never waits
        finally:
            _BUILDING.arena = None
        if arena is not None:
            layer = arena.pack(layer)  # (what the build already wrote into it stays where it is)
        with self._lock:
            self._checked.add(i)
            self.expansions += 1
            if i in self._keep:
                layer = self._kept.setdefault(i, layer)
            else:
                self._pass(i, layer)
        return layer

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def kept(self) -> int:
        """Layers the budget keeps expanded between runs."""
        return len(self._keep)

    def held_bytes(self) -> int:
        with self._lock:
            return sum(self.sizes[i] for i in (*self._kept, *self._passing))

    def describe(self) -> str:
        """One line: the budget and what it keeps."""
        n, total = len(self), sum(self.sizes)
        if any(v is not None for v in self._views.values()):
            where = ("no memory limit known" if self.budget is None
                     else f"within the {format_bytes(self.budget)} memory budget")
            copies, all_copies = self.copy_bytes()
            return (f"{plural(n, 'layer')} held in their file's blocks ({format_bytes(self.view_bytes())}); "
                    f"{len(self._kept) + len(self._passing)} expanded to float32 for long runs "
                    f"({format_bytes(copies)} of {format_bytes(all_copies)}, {where})")
        with self._lock:
            held = len({*self._kept, *self._passing})
        plan = n if self.budget is None else self.kept
        # (a store that let go of its layers, let_go, keeps its plan but holds fewer until they run)
        done, now = ("expanded", "") if held >= plan else ("kept expanded as they run", f"; {held} held now")
        if self.budget is None:
            return f"all {plural(n, 'layer')} {done} ({format_bytes(total)} float32; no memory limit known){now}"
        if self.kept == n:
            return (f"all {plural(n, 'layer')} {done} ({format_bytes(total)} float32, within the "
                    f"{format_bytes(self.budget)} memory budget){now}")
        return (f"{self.kept} of {plural(n, 'layer')} kept expanded within the {format_bytes(self.budget)} "
                f"memory budget (all: {format_bytes(total)} float32); the other {n - self.kept} are "
                f"expanded from the file each time they run{now}")
