"""How the calculator's numbers are written, the same in the window and on the command line: binary
byte units, counts with k / M / B, the MHA / GQA / MQA comparison's rows."""

from __future__ import annotations

from attnviz.engine.reading.byte_sizes import BINARY_UNITS, format_bytes  # noqa: F401 (sizes as shown everywhere)
from attnviz.engine.reading.token_text import plural, tokens  # noqa: F401 (the Calculator's words too)


def latent_readers(n_head: int) -> str:
    """The subject of "... one shared latent" (MLA): `all 8 query heads read`, `its 1 query head reads`."""
    return "its 1 query head reads" if n_head == 1 else f"all {n_head:,} query heads read"


def exact_bytes(n: int) -> str:
    """`1152` -> `1,152 bytes (1.12 KiB)`: exact, and binary units from 1 KiB."""
    return plural(n, "byte") + (f" ({format_bytes(n)})" if n >= 1024 else "")


def exact_count(n: int) -> str:
    """`6738415616` -> `6,738,415,616 (6.74 B)`."""
    return f"{n:,}" + (f" ({format_count(n)})" if n >= 1000 else "")


def shown_variants(r) -> list[str]:  # r: a sizing.CalcResult
    """The keys of `r.compare` to show (window and command line alike): a model that is MHA (or
    MQA) as given would list that variant twice with the same numbers (a curve hidden under its
    own, a second table row), so it is shown once, as given."""
    given = r.compare["gqa"].n_kv_head
    return [k for k in r.compare if k == "gqa" or r.compare[k].n_kv_head != given]


def window_split(r) -> tuple[int, int] | None:  # r: a sizing.CalcResult
    """(full layers, window layers) where a sliding window keeps some layers' caches shorter than
    seq_len: a row's total is then not its per-token figure × seq_len. None otherwise."""
    i, n_win = r.inputs, r.window_layer_count
    if not (i.sliding_window and n_win and i.seq_len > i.sliding_window):
        return None
    return i.n_layer - n_win, n_win


def compare_cells(v, r=None, joint: str = " + ") -> tuple[str, str, str, str]:  # v: a sizing.Variant
    """One KV layout's row of the comparison (the window's table and the command line's): KV heads,
    cache per token, cache at seq_len x batch, reduction vs MHA ("4×"). Past a sliding window with
    full layers too (window_split of `r`), the per-token cache is the full layers' and the window
    layers' apart (`joint` between them), as compare_note multiplies them out."""
    split = None if r is None else window_split(r)
    per = format_bytes(v.kv_bytes_per_token)
    if split is not None and split[0]:
        per = joint.join(format_bytes(v.kv_bytes_per_token_per_layer * n) for n in split)
    return ("latent" if v.n_kv_head is None else str(v.n_kv_head), per,
            format_bytes(v.kv_bytes_total), f"{v.reduction_vs_mha:.3g}\u00d7")


def compare_note(r) -> str:
    """How the comparison's total comes from its per-token column past a sliding window (the window's
    table and the command line's, under it), or "" where it is per token × seq_len × batch."""
    split = window_split(r)
    if split is None:
        return ""
    i = r.inputs
    T, w, b = f"{i.seq_len:,}", f"{i.sliding_window:,}", i.batch
    total = f"full layers' per token × {T} + window layers' × {w}" if split[0] else f"per token × {w}"
    why = window_keep(*split, i.sliding_window, "only ")
    total = f"({total}) × batch {b:,}" if b > 1 and split[0] else f"{total} × batch {b:,}" if b > 1 else total
    return f"Past the {w}-token window: at {T} tokens = {total} ({why})."


def window_keep(n_full: int, n_win: int, window: int, only: str = "") -> str:
    """Which layers keep how many tokens past a sliding window, as the Calculator's lines say it:
    "the 21 window layers keep their last 4,096 tokens", "the 1 window layer keeps its last 512
    tokens", "every layer keeps its last 1 token" (none full); `only` ("only ") after the verb."""
    if not n_full:
        return f"every layer keeps {only}its last {tokens(window)}"
    one = n_win == 1
    return (f"the {plural(n_win, 'window layer')} keep{'s' * one} {only}{'its' if one else 'their'} "
            f"last {tokens(window)}")


def per_token_header(r) -> str:
    """The comparison's per-token column: "per token", or its two parts (compare_cells)."""
    split = window_split(r)
    return "per token" if split is None or not split[0] else "per token: full + window layers"


def format_count(n: int | float) -> str:
    """`124439808` -> `124.4 M`; `6738415616` -> `6.74 B`."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= scale:
            value = n / scale
            return f"{value:.3g} {suffix}" if value < 100 else f"{value:.1f} {suffix}"
    return f"{n:g}" if isinstance(n, float) else str(n)


def window_layers_text(spec, most: int | None = None) -> str:
    """Which layers a sliding window is on, as a sentence reads it: `all layers`, `even layers`,
    `odd layers`, `layers 0, 2, 5` (spec: CalcInputs.sliding_window_layers; indices as a list or
    as the command line's "0,2,5"), or `29 listed layers` for a list longer than `most`."""
    if isinstance(spec, str) and spec not in ("all", "even", "odd", ""):
        spec = [int(p) for p in spec.split(",")]
    if isinstance(spec, (list, tuple)):
        if most is not None and len(spec) > most:
            return f"{len(spec)} listed layers"
        return f"layers {', '.join(str(int(i)) for i in spec)}" if spec else "no layers"
    return f"{spec or 'all'} layers"
