"""The one home of what the window and the exported figures share in how they show heads: colours
(the window's theme, the focus mark, KV groups, roles) and the colormap table with its indexing. No
widgets; the window, the anatomy figure and the heatmap exports all read these, so a KV group, a
role or a weight has the same colour everywhere.

Head titles, scale modes and group size live in the engine (`patterns.head_title`,
`patterns.SCALE_MODES`, `patterns.group_size`) and the defaults in `registry` (`DEFAULT_MODEL`,
`DEFAULT_TEXT`), where the commands and the engine's own messages read them too."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np

from attnviz.figures.data import COLORMAPS, ExportError

# --- token labels on an axis -----------------------------------------------------------------------
LABEL_CHARS = 16  # characters of a token on an axis (the hover read-out has it whole)


def axis_label(label: str, chars: int = LABEL_CHARS) -> str:
    """A token label (engine/token_text made it readable: whitespace already shows as marks) as an
    axis shows it: at most `chars` characters, an ellipsis at the cut."""
    return label if len(label) <= chars else label[: chars - 1] + "\u2026"


# --- colours --------------------------------------------------------------------------------------
BACKGROUND = "#202124"  # the window's heatmap views (dark)
TEXT = "#e8eaed"  # text on BACKGROUND
PAPER_TEXT, PAPER_MUTED, PAPER_FRAME = "#1e1e1e", "#646464", "#969696"  # an exported figure's ink on white
FOCUS = "#ff9e3d"  # the focused head, everywhere (so no KV-group colour is orange)
WINDOW_EDGE = "#00e5ff"  # a local layer's sliding-window edge (dashed), in the grid and focus view
GOOD = "#1a5e1a"  # text that says something holds (a head clears the bar, "equal" costs)
WARNING = "#b35c00"  # text that says something is missing or weaker than asked
ERROR = "#b00020"  # text that says something failed (a form field, the export dialog)
ERROR_BACKGROUND = "#8b1a1a"  # the window's error banner (white text)
# KV-group colours: Tableau 10 without its orange, which FOCUS takes
GROUP_COLORS = ("#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf")
ROLE_COLORS = {  # heads.ROLES and heads.MIXED
    "previous": "#4e79a7",
    "next": "#76b7b2",
    "self": "#edc948",
    "sink": "#9c755f",
    "duplicate": "#f28e2b",
    "induction": "#e15759",
    "mixed": "#5f6368",
}
ROLE_SHORT = {"previous": "prev", "next": "next", "self": "self", "sink": "sink", "duplicate": "dup",
              "induction": "ind", "mixed": "·"}
DARK_ON = frozenset({"self", "next"})  # light role colours: dark text on them


def group_color(group: int) -> str:
    """The colour of KV group `group` (the KV head a query head reads)."""
    return GROUP_COLORS[int(group) % len(GROUP_COLORS)]


def role_text_color(role: str) -> str:
    """Text drawn on a role's colour."""
    return "#101010" if role in DARK_ON else "#ffffff"


def bar_label(weighted: bool, per_head_max: bool = False) -> str:
    """A colour bar's title, what its numbers are: the weights (value-weighted or not), or each
    head's weights over that head's maximum (0..1)."""
    if per_head_max:
        return "weight \u00f7 head max" + (" (value-weighted)" if weighted else "")
    return "value-weighted attention" if weighted else "attention weight"


# --- the colormap ---------------------------------------------------------------------------------
N_COLORS = 255  # colours per colormap; table entry 0 is the gap (no value), 1..255 the colormap


def colormap_colors(name: str, n: int) -> np.ndarray:  # -> [n, 3] uint8
    """The one place a colormap is sampled: pyqtgraph's map at n evenly spaced points, 0 to 1, as
    `pg.colormap.get(name).getLookupTable(0, 1, n)` gives it (tests/figures/test_colormap_file.py
    holds the two equal for every map pyqtgraph ships). Read from pyqtgraph's own map file, without
    importing pyqtgraph: its package import (QtWidgets and all) would be a large share of an image
    export."""
    pos, stops = _map_stops(name)  # [k], [k, 3] uint8
    x = np.linspace(0.0, 1.0, n)
    lut = np.empty((n, 3), np.uint8)
    for i in range(3):  # as ColorMap.map: np.interp per channel, stored into bytes (truncated)
        lut[:, i] = np.interp(x, pos, stops[:, i])
    return lut


def colormap_names() -> list[str]:
    """The maps pyqtgraph ships (its colors/maps folder), by name."""
    return sorted(p.stem for p in _maps_dir().iterdir() if p.suffix in (".csv", ".hex"))


def _maps_dir() -> Path:
    spec = importlib.util.find_spec("pyqtgraph")  # finds the package without running its __init__
    return Path(next(iter(spec.submodule_search_locations))) / "colors" / "maps"


@lru_cache(maxsize=32)
def _map_stops(name: str) -> tuple[np.ndarray, np.ndarray]:  # -> pos [k], colours [k, 3] uint8
    """A map file read as pyqtgraph's colormap._getFromFile reads it, and its stops as
    ColorMap.getStops(BYTE) gives them: each channel 0..255 through QColor's float (c / 255 in
    float32), times 255, truncated to a byte."""
    folder = _maps_dir()
    path = next((folder / f"{name}{ext}" for ext in (".csv", ".hex")
                 if name and "/" not in name and (folder / f"{name}{ext}").is_file()), None)
    if path is None:
        known = colormap_names()
        raise ExportError(f"unknown colormap {name!r}; try {', '.join(COLORMAPS)} "
                          f"({len(known)} known)")
    colors = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] == ";":
            continue
        value = line.split(";", 1)[0]
        if path.suffix == ".csv":
            comp = value.split(",")
            if len(comp) < 3:
                continue
            colors.append([int(255 * float(c) + 0.5) for c in comp[:3]])
        else:
            h = value[1:] if value.startswith("#") else value
            if len(h) in (3, 4):
                h = "".join(2 * c for c in h)
            if len(h) < 6:
                continue
            colors.append(list(bytes.fromhex(h))[:3])
    rgb = np.asarray(colors, np.float32) / np.float32(255)  # QColor.getRgbF: float32
    stops = (rgb.astype(np.float64) * 255).astype(np.uint8)
    return np.linspace(0.0, 1.0, len(colors)), stops


def heat_table(name: str, gap=(255, 255, 255, 0)) -> np.ndarray:  # -> [256, 4] uint8 RGBA
    """The table every heatmap is coloured through, window and exports alike: entry 0 is the gap
    (transparent in the window, where a cell with no value shows the no-value colour under it:
    no_value_colour), 1..255 the colormap."""
    lut = np.empty((N_COLORS + 1, 4), np.uint8)
    lut[0] = gap
    lut[1:, :3] = colormap_colors(name, N_COLORS)
    lut[1:, 3] = 255
    return lut


def heat_positions(values: np.ndarray, top, out: np.ndarray | None = None) -> np.ndarray:
    """[...] weights on a 0..top scale -> [...] float32 table positions in 1.5..255.5, which truncate
    (`astype(np.uint8)`, or assigning into a uint8 array) to the indices 1..255: round(v / top * 254)
    + 1, so 0 is colour 1, top or more colour 255, never 0 (the gap). `top` broadcasts against
    `values` ([n_head, 1, 1] for one scale per head); `out` is a float32 buffer of values' shape
    (the window's per-keystroke path reuses one)."""
    pos = np.asarray(np.multiply(values, np.float32(N_COLORS - 1) / np.asarray(top, np.float32),
                                 out=out, dtype=np.float32))  # a 0-d array for one value, not a scalar
    np.clip(pos, 0.0, np.float32(N_COLORS - 1), out=pos)
    pos += np.float32(1.5)
    return pos


# --- the diverging map: signed values (a difference A - B), symmetric about 0 ------------------------
DIVERGING_STOPS = ((33, 102, 172), (146, 197, 222), (247, 247, 247), (244, 165, 130), (178, 24, 43))


def diverging_colors(n: int) -> np.ndarray:  # -> [n, 3] uint8: blue (negative) - white (0) - red
    stops = np.array(DIVERGING_STOPS, np.float64)
    t = np.linspace(0, len(stops) - 1, n)
    i = np.minimum(t.astype(int), len(stops) - 2)
    f = (t - i)[:, None]
    return np.ascontiguousarray(np.round(stops[i] * (1 - f) + stops[i + 1] * f).astype(np.uint8))


def diverging_lut() -> np.ndarray:  # -> [256, 3] uint8 (the figures' signed maps index it 0..255)
    return diverging_colors(256)


def signed_table(gap=(255, 255, 255, 0)) -> np.ndarray:  # -> [256, 4] uint8 RGBA
    """heat_table's layout for the diverging map: entry 0 the gap, 1..255 blue .. white (128: the
    value 0) .. red."""
    lut = np.empty((N_COLORS + 1, 4), np.uint8)
    lut[0] = gap
    lut[1:, :3] = diverging_colors(N_COLORS)
    lut[1:, 3] = 255
    return lut


def signed_positions(values: np.ndarray, lim, out: np.ndarray | None = None) -> np.ndarray:
    """[...] signed values on a -lim..lim scale -> float32 positions in signed_table, as
    heat_positions places 0..2 lim (so -lim is colour 1, 0 colour 128, lim colour 255)."""
    shifted = np.add(values, np.float32(lim), out=out, dtype=np.float32)
    return heat_positions(shifted, np.float32(2 * lim), out=shifted)


def heat_index(values: np.ndarray, top) -> np.ndarray:  # [...] -> [...] uint8 in 1..255
    """The table index of each weight on a 0..top scale (see heat_positions)."""
    return heat_positions(values, top).astype(np.uint8)


# --- no value ---------------------------------------------------------------------------------------
# A cell with no number (a hidden first key, a row with no weight left under Hide first token, a
# pooled cell of such rows alone) has one colour in every view and export: the first of these that is
# at least NO_VALUE_DISTANCE from every colour of the colormap and of the diverging map (A - B takes
# the colormap's place in the same views), so it never reads as a weight, 0 or the top.
NO_VALUE_CHOICES = (("magenta", (255, 0, 255)), ("green", (0, 255, 0)), ("blue", (0, 0, 255)))
NO_VALUE_DISTANCE = 50.0  # CIELAB ΔE (CIE76); 2.3 is about the smallest difference an eye sees


def lab(rgb) -> np.ndarray:  # [..., 3] sRGB 0..255 -> [..., 3] CIELAB (D65)
    c = np.asarray(rgb, np.float64) / 255.0
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    xyz = c @ np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                        [0.0193339, 0.1191920, 0.9503041]]).T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], -1)


def colour_distance(rgb, colours) -> float:
    """The least CIELAB distance from one colour to any of `colours` [n, 3]."""
    return float(np.linalg.norm(lab(colours) - lab(rgb), axis=-1).min())


@lru_cache(maxsize=32)
def _no_value(name: str) -> tuple[str, tuple[int, int, int]]:
    colours = np.concatenate([colormap_colors(name, 1024), diverging_colors(1024)])
    far = [c for c in NO_VALUE_CHOICES if colour_distance(c[1], colours) >= NO_VALUE_DISTANCE]
    return far[0] if far else max(NO_VALUE_CHOICES, key=lambda c: colour_distance(c[1], colours))


def no_value_colour(name: str) -> tuple[int, int, int]:
    """The (r, g, b) of a cell with no value under colormap `name`, in every view and export."""
    return _no_value(name)[1]


def no_value_word(name: str) -> str:
    """That colour in a word, as a legend says it ("magenta")."""
    return _no_value(name)[0]


def no_value_legend(name: str, first_key: bool = True, rows: bool = True) -> str:
    """A legend's words for that colour, naming what is painted in it: the hidden first key's
    column (`first_key`), rows with no weight left (`rows`); "magenta: no value (the hidden first
    key, or a row with no weight left)"."""
    why = ", or ".join(w for on, w in ((first_key, "the hidden first key"), (rows, "a row with no weight left")) if on)
    return f"{no_value_word(name)}: no value ({why})"
