"""A model folder with checkpoints across training: the same model at several training steps.

Layout (written by scripts/train_toy.py): the folder is an ordinary model folder (config.json,
tokenizer.json, model.safetensors: the last checkpoint) plus `checkpoints.json`, which lists every
checkpoint in training order with its step, tokens seen, training loss and scores, and the folder
(relative to the model folder) holding its model.safetensors ("." for the last one).

Every checkpoint shares the config and the tokenizer; each becomes its own `Model` (its own weights
and KV cache), loaded once and kept, so moving between steps costs one forward pass.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.computing.families import LOADERS
from attnviz.engine.computing.model import Model, load_folder
from attnviz.engine.reading.validate import exists, read_json_object, show
from attnviz.engine.reading.weights import Checkpoint

log = logging.getLogger(__name__)

CHECKPOINTS_FILE = "checkpoints.json"
_WHICH: "weakref.WeakKeyDictionary[Model, tuple[CheckpointInfo, int]]" = weakref.WeakKeyDictionary()


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


def _number(entry, key, where, kind=float):
    value = entry.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelLoadError(f"{where}: {key} is {show(value)}, expected a number")
    return kind(value)


def read_checkpoint_list(folder: Path) -> tuple[dict, list[CheckpointInfo]]:
    """(the whole checkpoints.json, its checkpoints) of a model folder; each entry checked."""
    path = Path(folder) / CHECKPOINTS_FILE
    meta = read_json_object(path)
    items = meta.get("checkpoints")
    if not isinstance(items, list) or not items:
        raise ModelLoadError(f"{path}: checkpoints is {show(items)}, expected a non-empty list")
    infos = []
    for i, e in enumerate(items):
        where = f"{path} checkpoints[{i}]"
        if not isinstance(e, dict):
            raise ModelLoadError(f"{where} is {show(e)}, expected an object")
        step = e.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ModelLoadError(f"{where}: step is {show(step)}, expected a whole number >= 0")
        sub = e.get("folder", ".")
        parts = Path(sub).parts if isinstance(sub, str) else None
        if not parts and sub != "." or parts and (Path(sub).is_absolute() or ".." in parts):
            raise ModelLoadError(f"{where}: folder is {show(sub)}, expected a folder inside "
                                 f"{Path(folder).name}")
        head = e.get("induction_head")
        head = tuple(int(x) for x in head) if isinstance(head, list) and len(head) == 2 else None
        infos.append(CheckpointInfo(i, step, _number(e, "tokens_seen", where, int),
                                    _number(e, "train_loss", where), _number(e, "icl_score", where),
                                    _number(e, "induction_score", where), head, sub))
    if any(b.step <= a.step for a, b in zip(infos, infos[1:])):
        raise ModelLoadError(f"{path}: checkpoint steps must increase")
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
        raise InputError(f"checkpoint {i} is out of range: this model has {n} checkpoints "
                         f"(0..{n - 1}, or -1 for the last)")
    return i % n


class CheckpointSet:
    """The checkpoints of one model folder, each a Model sharing config and tokenizer.
    Thread-safe: models are built under a lock, once each."""

    def __init__(self, model: Model, meta: dict, infos: list[CheckpointInfo]):
        self.base = model  # the folder's own model: the last checkpoint
        self.meta = meta
        self.infos = infos
        self._models: dict[int, Model] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.infos)

    @property
    def last(self) -> int:
        return len(self.infos) - 1

    def index(self, i: int) -> int:
        return check_index(i, len(self.infos))

    def model(self, i: int) -> Model:
        """The model at checkpoint i (0 first, -1 last), loaded on first use and kept."""
        i = self.index(i)
        with self._lock:
            m = self._models.get(i)
            if m is None:
                m = self._load(i)
                self._models[i] = m
                _WHICH[m] = (self.infos[i], len(self.infos))
            return m

    def preload(self) -> None:
        """Load every checkpoint now (each is small), so moving between steps never reads a file."""
        for i in range(len(self.infos)):
            self.model(i)

    def _load(self, i: int) -> Model:
        info = self.infos[i]
        base = self.base
        folder = (base.path / info.folder).resolve()
        if folder == base.path.resolve():
            return base
        if not folder.is_relative_to(base.path.resolve()):
            raise ModelLoadError(f"checkpoint {i} folder {info.folder} is outside {base.path}")
        weights = LOADERS[base.config.family](base.config, Checkpoint(folder))
        # the same name: views and settings name the model, the step is recorded beside it
        return Model(base.name, folder, base.config, weights,
                     base.tokenizer, license=base.license, notice=base.notice)

    def induction_scores(self, indices=None) -> list[tuple[int, int, float]]:
        """(layer, head, strength) of the best induction head of each checkpoint on the
        repeated-random probe (attnviz.engine.analysing.probes.run_probe), as checkpoints.json records."""
        from attnviz.engine.analysing.heads import score_result, unknown_token_ids
        from attnviz.engine.analysing.probes import run_probe

        out = []
        for i in range(len(self.infos)) if indices is None else indices:
            m = self.model(i)
            result, _ = run_probe(m)
            out.append(score_result(result, unknown_ids=unknown_token_ids(m)).best_strength("induction"))
        return out


def checkpoint_record(model: Model | None) -> dict | None:
    """{index, step, of} for a model that came from a CheckpointSet (what export sidecars
    record), else None (no model: None)."""
    got = None if model is None else _WHICH.get(model)
    if got is None:
        return None
    info, n = got
    return {"index": info.index, "step": info.step, "of": n}


def load_checkpoints(folder_or_model, name: str | None = None) -> CheckpointSet | None:
    """The CheckpointSet of a model folder (or of a loaded Model), or None when it has none."""
    if isinstance(folder_or_model, Model):
        model = folder_or_model
    else:
        model = load_folder(Path(folder_or_model), name=name)
    path = getattr(model, "path", None)
    if path is None or not Path(path).is_dir() or not exists(Path(path) / CHECKPOINTS_FILE):
        return None
    meta, infos = read_checkpoint_list(Path(path))
    return CheckpointSet(model, meta, infos)


def model_at(model: Model, checkpoint: int | None) -> Model:
    """`model` at checkpoint `checkpoint` (None: the model as loaded, which is the last one).
    A model without checkpoints takes only None, 0 and -1."""
    ckpts = load_checkpoints(model)
    if ckpts is None:
        if checkpoint is None:
            return model
        if checkpoint in (0, -1):
            return model
        raise InputError(f"checkpoint {checkpoint} is out of range: {model.name} has no training "
                         "checkpoints (only 0 or -1, the model itself)")
    return ckpts.model(-1 if checkpoint is None else checkpoint)
