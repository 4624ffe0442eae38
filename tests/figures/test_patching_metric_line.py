"""The Patching view's metric line says what effect 1 and 0 mean in the direction that was run:
denoising, 1 is the clean answer back and 0 no change; noising, the same formula gives 1 where
nothing changed and 0 where the corrupted answer came in."""

import numpy as np
import pytest

from attnviz.engine import load_model
from attnviz.engine.analysing.patching import patch
from attnviz.figures import patching
from tiny import FIXTURES

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
CORRUPT = [3, 1, 4, 1, 5, 9, 2, 7, 5, 3, 5]


@pytest.mark.parametrize("direction, words", [
    ("denoise", "effect 1 = clean answer back, 0 = unchanged"),
    ("noise", "effect 1 = unchanged, 0 = corrupted answer in"),
])
def test_the_metric_line_reads_the_effect_in_its_direction(direction, words):
    model = load_model(FIXTURES / "gpt2")
    result = patch(model, np.array(IDS), np.array(CORRUPT), "resid", position=8, direction=direction)
    view = patching.patch_view(result, model.name, list(map(str, IDS)), list(map(str, CORRUPT)), "5", "3")
    assert view.metric_line().endswith(words)
    unchanged = view.values[:, 9:]  # after P: the base run's own diff
    assert (unchanged == (0.0 if direction == "denoise" else 1.0)).all()
    assert patching.readout(view, 0, 10).endswith(f"effect {unchanged[0, 1]:+.4f}")
