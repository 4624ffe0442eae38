"""What the export tests of the figures, the window and the command line share: every name under a
folder with its bytes (to check that a failed export changed nothing), a call that fails on its
n-th use, a write that stops half-way, an earlier export to write over, and the numbers an exported
figure's colour bar paints (bar_labels)."""

from __future__ import annotations

import os
from pathlib import Path

SENTENCE = "The keys to the cabinet are on the table."
SMALL = 400  # px: an image of about 12 kB


def snapshot(folder: Path) -> dict[str, object]:
    """Every name under `folder`, hidden ones included, with its bytes (files), its target
    (symbolic links) or None (folders)."""
    out: dict[str, object] = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root, name)
            rel = str(p.relative_to(folder))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = None
            else:
                out[rel] = p.read_bytes()
    return out


def leftovers(folder: Path) -> list[str]:
    """The names directly under `folder`, sorted."""
    return sorted(p.name for p in folder.iterdir())


def export(run, path, *, head=0, width=SMALL, **kw):
    """export_result of `run` (model "m", layer 0): head `head`, or the layer when it is None."""
    from attnviz.figures.write import export_result

    scope = kw.pop("scope", "head" if head is not None else "layer")
    return export_result(run, path, model="m", scope=scope, layer=0, head=head, width=width,
                         **kw)


def old_pair(run, folder: Path) -> Path:
    """`folder` with an earlier export fig.png + fig.png.json (head 0) and an unrelated file."""
    from attnviz.figures.data import open_sidecar

    (folder / "keep.txt").write_text("mine")
    export(run, folder / "fig.png", head=0)
    assert open_sidecar(folder / "fig.png")["head"] == 0
    return folder


class Calls:
    """Replace export_data.<module>.<name> so that its n-th call (1-based) raises `exc`; other
    calls go through."""

    def __init__(self, monkeypatch, owner, name, n, exc):
        self.real, self.n, self.exc, self.count = getattr(owner, name), n, exc, 0
        monkeypatch.setattr(owner, name, self)

    def __call__(self, *args, **kwargs):
        self.count += 1
        if self.count == self.n:
            raise self.exc
        return self.real(*args, **kwargs)


def half_then(exc, on_file: int):
    """A stand-in for the writer's write call that writes half of file number `on_file` (1-based)
    and then raises `exc`, like a disk filling up or Ctrl+C in the middle of a write."""
    from attnviz.figures import data as export_data

    real = export_data.write_all
    seen = []

    def write_all(fd, data):
        seen.append(fd)
        if len(seen) == on_file:
            real(fd, data[:len(data) // 2])
            raise exc
        real(fd, data)
    return write_all


def bar_labels(top: float) -> list[str]:
    """The numbers an exported layer figure (SVG) paints, its colour bar's labels, lowest first, for
    weights whose largest is `top` (the token labels and titles hold letters)."""
    return sorted((text for _y, _size, text in bar_label_spots(top)), key=label_value)


def label_value(text: str) -> float:
    """A bar label's number ("−" the minus, `2.5e+29` an exponent)."""
    return float(text.replace("\u2212", "-"))


def bar_label_spots(top: float, n_layer: int = 1, n_head: int = 2, scope: str = "layer",
                    width: int = 900) -> list[tuple[float, float, str]]:
    """(baseline y, font size, text) of each number an exported figure (SVG, `width` pixels) of
    `n_layer` x `n_head` heads of 4 tokens paints: its colour bar's labels, for weights whose
    largest is `top` (the token labels and titles hold letters)."""
    import re
    import xml.etree.ElementTree as ET
    from types import SimpleNamespace

    import numpy as np

    from attnviz.figures import heatmaps
    from attnviz.figures.data import make_view

    att = np.full((n_layer, n_head, 4, 4), top / 4, dtype=np.float32)
    att[0, 1, 3, 2] = top
    result = SimpleNamespace(text="fake text", tokens=["ta", "tb", "tc", "td"], labels=["ta", "tb", "tc", "td"],
                             input_ids=np.arange(4), attentions=att, kv_group=np.arange(n_head))
    view = make_view(result, model="m", scope=scope, layer=0, head=1 if scope == "head" else None)
    svg = heatmaps.svg_bytes(view, width)[0]
    return [(float(e.get("y")), float(e.get("font-size")), e.text.strip()) for e in ET.fromstring(svg).iter()
            if e.tag.endswith("text") and e.text
            and re.fullmatch(r"\d+(\.\d+)?(e[+\u2212]\d+)?", e.text.strip())]
