"""A model folder with checkpoints across training: the same model at several training steps, as
its checkpoints.json lists them (engine/reading/checkpoint_list.py).

Every checkpoint shares the config and the tokenizer; each becomes its own `Model` (its own weights
and KV cache), loaded once and kept, so moving between steps costs one forward pass.
"""

from __future__ import annotations

import threading
import weakref
from pathlib import Path

from attnviz.engine.errors import InputError, ModelLoadError
from attnviz.engine.computing.load import load_folder
from attnviz.engine.computing.model import Model
from attnviz.engine.reading.checkpoint_list import (
    CHECKPOINTS_FILE, CheckpointInfo, check_index, read_checkpoint_list,
)
from attnviz.engine.reading.safetensors_model import LOADERS
from attnviz.engine.reading.validate import exists
from attnviz.engine.reading.weights import Checkpoint

_WHICH: "weakref.WeakKeyDictionary[Model, tuple[CheckpointInfo, int]]" = weakref.WeakKeyDictionary()


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

    def loaded(self) -> list[Model]:
        """The models of the checkpoints loaded so far, in no set order."""
        with self._lock:
            return list(self._models.values())

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
        weights = LOADERS[base.config.family](base.config, Checkpoint(folder, base.path / "config.json"))
        # the same name: views and settings name the model, the step is recorded beside it
        return Model(base.name, folder, base.config, weights,
                     base.tokenizer, license=base.license, notice=base.notice)


def checkpoint_record(model: Model | None) -> dict | None:
    """{index, step, of} for a model that came from a CheckpointSet (what export sidecars
    record), else None (no model: None)."""
    got = None if model is None else _WHICH.get(model)
    if got is None:
        return None
    info, n = got
    return {"index": info.index, "step": info.step, "of": n}


def checkpoint_entry(checkpoint: dict | None) -> dict:
    """{"checkpoint": {index, step, of}} for a JSON document (an export, a sidecar, a command's
    --json) of a model with training checkpoints (`checkpoint`: checkpoint_record's), else {}."""
    return {"checkpoint": dict(checkpoint)} if checkpoint else {}


def checkpoint_words(model: Model | None) -> str:
    """' at checkpoint I of 0..N-1 (step S)' for a model that came from a CheckpointSet, else ''."""
    rec = checkpoint_record(model)
    return "" if rec is None else f" at checkpoint {rec['index']} of 0..{rec['of'] - 1} (step {rec['step']})"


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
