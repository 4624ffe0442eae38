"""Model loads as the worker runs them (ui/machinery/worker.py) on threads of their own: a load
checked by a trial run before the window takes the model, and a model's training checkpoints with
every checkpoint's weights preloaded."""

from __future__ import annotations

from dataclasses import dataclass
from attnviz.engine.computing.request import RunRequest


@dataclass(frozen=True)
class LoadRequest:
    id: int
    source: str  # a model name or a folder


def checkpoints_of(model):  # -> CheckpointSet | None, every checkpoint's weights loaded
    from attnviz.engine.computing.checkpoints import load_checkpoints

    ckpts = load_checkpoints(model)
    if ckpts is not None:
        ckpts.preload()
    return ckpts


TRIAL_IDS = 3  # token ids a freshly loaded model runs before the window takes it


def load_checked(source: str):
    """load_model, then a trial run on a few token ids: a model whose weights are finite but give
    non-finite patterns (a 1e38 weight overflows in q.k) is refused here, as a load that failed, so
    the window keeps the model, sentence and heatmaps it had, rather than take a model it cannot
    show."""
    import numpy as np

    from attnviz.engine import load_model

    model = load_model(source)
    with np.errstate(all="ignore"):  # the engine names the broken layer itself
        model.run(ids=list(range(min(TRIAL_IDS, int(model.config.vocab_size)))),
                  request=RunRequest(use_cache=False))
    return model
