"""A broken checkpoints.json is refused in one sentence that names the file, the entry's field, the
value found and what it must be ("… sets checkpoints[1].step to -1, but it must be …"), never as
"file: field is value, expected …", whose colon a window's "Could not load model x" would follow
with another."""

import json

import pytest

from attnviz.engine.errors import ModelLoadError
from attnviz.engine.reading.checkpoint_list import read_checkpoint_list

GOOD = {"step": 0, "folder": "."}

CASES = [
    ({"checkpoints": []}, "sets checkpoints to [], but it must be a non-empty list"),
    ({}, "does not set checkpoints, which must be a non-empty list"),
    ({"checkpoints": [GOOD, 3]}, "sets checkpoints[1] to 3, but it must be an object"),
    ({"checkpoints": [GOOD, {"step": -1}]}, "sets checkpoints[1].step to -1, but it must be a whole number >= 0"),
    ({"checkpoints": [GOOD, {"folder": "x"}]}, "does not set checkpoints[1].step, which must be a whole number >= 0"),
    ({"checkpoints": [{"step": 0, "folder": "../x"}]},
     "sets checkpoints[0].folder to '../x', but it must be a folder inside m"),
    ({"checkpoints": [{"step": 0, "tokens_seen": "many"}]},
     "sets checkpoints[0].tokens_seen to 'many', but it must be a number"),
    ({"checkpoints": [GOOD, {"step": 0}]},
     "lists checkpoint steps that do not increase; each must be above the one before"),
]


@pytest.mark.parametrize("doc, said", CASES, ids=[s.split(",")[0][:40] for _, s in CASES])
def test_a_broken_checkpoint_list_is_one_sentence_naming_the_file_and_field(tmp_path, doc, said):
    folder = tmp_path / "m"
    folder.mkdir()
    path = folder / "checkpoints.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ModelLoadError) as err:
        read_checkpoint_list(folder)
    assert str(err.value) == f"{path} {said}", str(err.value)
