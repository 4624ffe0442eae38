"""What Model.run gives back: RunResult (a text's tokens and patterns, and how the run used the
KV cache), and the cache's byte counts it reports (kept_sizes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attnviz.engine.reading.pages import owner
from attnviz.engine.computing.trace import KVCache, Trace


@dataclass(frozen=True)
class RunResult:
    text: str
    tokens: list[str]
    labels: list[str]
    offsets: list[tuple[int, int]]
    input_ids: np.ndarray  # int64 [T]
    attentions: np.ndarray  # float32 [n_layer, n_head, T, T]
    kv_group: np.ndarray  # int64 [n_head]
    truncated: bool = False
    n_tokens_full: int = 0
    compute_s: float = 0.0
    cache_reused: int = 0  # tokens whose rows came from the KV cache
    cache_computed: int = 0  # tokens computed this run (T for a full run)
    cache_bytes: int = 0  # bytes of K and V the model's cache holds after this run (0: it keeps no cache)
    # bytes of the memory those K and V arrays lie in: cache_bytes and the room the arrays keep for
    # later positions (trace.append_positions); 0 where not measured
    cache_allocated: int = 0
    # whether this run read and extended the model's KV cache; False: it computed apart from it
    # (another run held it, use_cache=False, edits, a trace's own past), and cache_bytes are then
    # the cache as other runs left it, of another text
    cache_used: bool = False
    # the earlier texts' runs the KV cache keeps beside this one (KVCache.earlier), and their K and V bytes
    cache_earlier: tuple[int, int] = (0, 0)
    notice: str | None = None  # one line for the user about what was changed in the text, if anything
    value_norms: np.ndarray | None = None  # float32 [n_layer, n_head, T]: ||v_j W_O(h)|| (RunRequest(values=True))
    head_share: np.ndarray | None = None  # float32 [n_layer, n_head]: share of the layer's attention output
    layer_inputs: tuple | None = None  # per layer float32 [T, d_model]: attention input (RunRequest(inputs=True))
    trace: Trace | None = None  # the run's trace when the caller passed one (run(trace=...))

    @property
    def n_tokens(self) -> int:
        return len(self.input_ids)


def kept_sizes(kept: KVCache | None) -> dict:
    """RunResult's counts of what the model's cache `kept` holds (None: no cache): its current
    run's K and V bytes, the memory their arrays lie in (0 where a run on another thread changed
    the cache between the two reads: never a figure below the bytes it holds), and its earlier
    runs and their K and V bytes."""
    if kept is None:
        return {"cache_bytes": 0, "cache_allocated": 0, "cache_earlier": (0, 0)}
    nbytes, arrays = kept.nbytes, [*kept.k, *kept.v]
    held = allocated_bytes(arrays) if sum(a.nbytes for a in arrays) == nbytes else 0
    return {"cache_bytes": nbytes, "cache_allocated": held, "cache_earlier": kept.earlier_kv()}


def allocated_bytes(arrays) -> int:
    """Bytes of the memory `arrays` lie in: each array's owner (pages.owner: itself, or the array
    it views) once (a K or V array is a view of one with room for later positions:
    append_positions, or of one buffer of every layer's: onerow_stack); nothing for a file's
    memory-mapped pages."""
    owners = {id(o): o.nbytes for o in map(owner, arrays) if o is not None}
    return sum(owners.values())
