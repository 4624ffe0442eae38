"""A model folder's checkpoints across training, as its `checkpoints.json` lists them.

Layout (written by scripts/train_toy.py): the folder is an ordinary model folder (config.json,
tokenizer.json, model.safetensors: the last checkpoint) plus `checkpoints.json`, which lists every
checkpoint in training order with its step, tokens seen, training loss and scores, and the folder
(relative to the model folder) holding its model.safetensors ("." for the last one). Each
checkpoint becomes a Model in engine/computing/checkpoints.py.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.reading.token_text import plural
from attnviz.engine.reading.validate import exists, read_json_object, refusal, show

log = logging.getLogger(__name__)

CHECKPOINTS_FILE = "checkpoints.json"


@dataclass(frozen=True)
class CheckpointInfo:
    index: int
    step: int
    tokens_seen: int | None
    train_loss: float | None
    icl_score: float | None
    induction_score: float | None  # best induction strength on the repeated-random probe
    induction_head: tuple[int, int] | None
    folder: str  # relative to the model folder

    def label(self) -> str:
        return f"step {self.step}"


def _number(entry, key, path, where, kind=float):
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise refusal(path, f"{where}.{key}", show(value), "a number")
    return kind(value)


def read_checkpoint_list(folder: Path) -> tuple[dict, list[CheckpointInfo]]:
    """(the whole checkpoints.json, its checkpoints) of a model folder; each entry checked."""
    path = Path(folder) / CHECKPOINTS_FILE
    meta = read_json_object(path)
    items = meta.get("checkpoints")
    if not isinstance(items, list) or not items:
        raise refusal(path, "checkpoints", show(items) if "checkpoints" in meta else None, "a non-empty list")
    infos = []
    for i, e in enumerate(items):
        where = f"checkpoints[{i}]"
        if not isinstance(e, dict):
            raise refusal(path, where, show(e), "an object")
        step = e.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise refusal(path, f"{where}.step", None if "step" not in e else show(step),
                          "a whole number >= 0")
        sub = e.get("folder", ".")
        parts = Path(sub).parts if isinstance(sub, str) else None
        if not parts and sub != "." or parts and (Path(sub).is_absolute() or ".." in parts):
            raise refusal(path, f"{where}.folder", show(sub), f"a folder inside {Path(folder).name}")
        head = e.get("induction_head")
        head = tuple(int(x) for x in head) if isinstance(head, list) and len(head) == 2 else None
        infos.append(CheckpointInfo(i, step, _number(e, "tokens_seen", path, where, int),
                                    _number(e, "train_loss", path, where), _number(e, "icl_score", path, where),
                                    _number(e, "induction_score", path, where), head, sub))
    if any(b.step <= a.step for a, b in zip(infos, infos[1:])):
        raise ModelLoadError(f"{path} lists checkpoint steps that do not increase; each must be above the one before")
    return meta, infos


def count_checkpoints(folder: Path) -> int:
    """How many checkpoints a model folder has (0: none, or a checkpoints.json that is broken)."""
    if not exists(Path(folder) / CHECKPOINTS_FILE):
        return 0
    try:
        return len(read_checkpoint_list(folder)[1])
    except ModelLoadError as exc:
        log.warning("ignoring checkpoints of %s: %s", folder, exc)
        return 0


def check_index(i: int, n: int) -> int:
    """A checkpoint index (negative counts from the end) -> 0..n-1, or InputError."""
    if isinstance(i, bool) or not isinstance(i, int) or not -n <= i < n:
        raise InputError(f"checkpoint {i} is out of range: this model has {plural(n, 'checkpoint')} "
                         f"(0..{n - 1}, or -1 for the last)")
    return i % n
