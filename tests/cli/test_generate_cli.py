"""`attnviz generate --json` prints the prompt, the new ids and tokens, the text and one entry per
step (id, token, the K and V bytes of its tokens and of the arrays holding them, the top-5); bad settings are refused before loading."""

import json

import pytest

from attnviz.cli import main
from attnviz.engine import load_model
from attnviz.engine.computing import generate as G
from attnviz.engine.computing.trace import KV_ROOM
from tiny import FIXTURES


def test_generate_json_holds_every_step(capsys):
    assert main(["generate", "--model", str(FIXTURES / "llama_gqa"), "--ids", "3,1,4,1,5",
                 "--max-new", "4", "--ignore-eos", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want_model = load_model(FIXTURES / "llama_gqa")
    want = G.generate(want_model, ids=[3, 1, 4, 1, 5], max_new=4, ignore_eos=True)
    assert out["prompt_ids"] == [3, 1, 4, 1, 5] and out["new_ids"] == want.new_ids
    assert len(out["steps"]) == 4 and out["new_tokens"] == [s["token"] for s in out["steps"]]
    assert [s["id"] for s in out["steps"]] == want.new_ids
    assert [s["kv_bytes"] for s in out["steps"]] == [s.kv_bytes for s in want.steps]
    # the arrays holding them: the prompt's own positions, then room for KV_ROOM more after a copy
    assert [s["kv_held_bytes"] for s in out["steps"]] == [s.kv_held for s in want.steps]
    per = G.kv_bytes_per_position(want_model.config)
    assert [s.kv_held for s in want.steps] == [5 * per] + [(6 + KV_ROOM) * per] * 3
    assert all(len(s["top"]) == 5 and s["top"][0]["id"] == s["id"] for s in out["steps"])
    assert set(out["steps"][0]["top"][0]) == {"id", "token", "logprob"}
    assert out["text"] == "3, 1, 4, 1, 5, " + ", ".join(map(str, want.new_ids))  # no tokenizer


def test_generate_refuses_bad_settings_in_one_line(capsys):
    assert main(["generate", "--ids", "1,2", "--max-new", "2", "--temperature", "-0.5"]) != 0
    assert "temperature must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "--ids", "1,2", "--max-new", "0"])
    assert "--max-new: must be a positive integer" in capsys.readouterr().err
