"""What a model's checkpoints across training (engine/computing/checkpoints.py) show: the best
induction head of each."""

from __future__ import annotations

from attnviz.engine.analysing.heads import score_result, unknown_token_ids
from attnviz.engine.analysing.probes import run_probe
from attnviz.engine.computing.checkpoints import CheckpointSet


def induction_scores(ckpts: CheckpointSet, indices=None) -> list[tuple[int, int, float]]:
    """(layer, head, strength) of the best induction head of each checkpoint (`indices`, default
    all) on the repeated-random probe (probes.run_probe), as checkpoints.json records."""
    out = []
    for i in range(len(ckpts)) if indices is None else indices:
        m = ckpts.model(i)
        result, _ = run_probe(m)
        out.append(score_result(result, unknown_ids=unknown_token_ids(m)).best_strength("induction"))
    return out
