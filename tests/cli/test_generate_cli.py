"""`attnviz generate --json` prints the prompt, the new ids and tokens, the text and one entry per
step (id, token, the K and V bytes of its tokens and of the arrays holding them, the top-5 and, when sampling, each one's probability in the draw); bad settings are refused before loading."""

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


def test_a_sampled_generations_top_says_each_tokens_probability_in_the_draw(capsys):
    """With --temperature, each top entry adds p_drawn: its probability in the draw (temperature and
    top-p applied, renormalised), as sampling.draw_p gives it from the step's own log-probabilities."""
    from attnviz.engine.computing.logits import log_softmax
    from attnviz.engine.computing.sampling import draw_p, draw_set

    assert main(["generate", "--model", str(FIXTURES / "llama_gqa"), "--ids", "3,1,4,1,5", "--max-new", "2",
                 "--ignore-eos", "--temperature", "0.7", "--top-p", "0.9", "--seed", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    model = load_model(FIXTURES / "llama_gqa")
    head = model.lm_head()
    for s in out["steps"]:
        r = model.run(ids=(out["prompt_ids"] + out["new_ids"])[:s["T"]], trace=G.Trace(resid=True))
        logprobs = log_softmax(head.logits(r.trace.resid[-1][-1:])[0])
        top = G.top_ids(logprobs, 5)
        assert [t["id"] for t in s["top"]] == top.tolist()
        assert [t["p_drawn"] for t in s["top"]] == pytest.approx(draw_p(draw_set(logprobs, 0.7, 0.9), top).tolist(), rel=1e-4)


def test_generate_refuses_bad_settings_in_one_line(capsys):
    assert main(["generate", "--ids", "1,2", "--max-new", "2", "--temperature", "-0.5"]) != 0
    assert "temperature must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["generate", "--ids", "1,2", "--max-new", "0"])
    assert "--max-new: must be a positive integer" in capsys.readouterr().err


def test_the_summary_line_says_why_the_generation_ended_in_words(capsys):
    assert main(["generate", "--model", str(FIXTURES / "llama_gqa"), "--ids", "3,1,4,1,5", "--max-new", "1",
                 "--ignore-eos"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("-- 1 new token: made the --max-new tokens asked for; K and V at the last step: "), last


def test_the_summary_line_gives_sizes_as_the_panel_does_with_the_exact_bytes_beside(capsys):
    from attnviz.engine.reading.byte_sizes import format_bytes

    assert main(["generate", "--model", str(FIXTURES / "llama_gqa"), "--ids", "3,1,4,1,5", "--max-new", "2",
                 "--ignore-eos"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    step = G.generate(load_model(FIXTURES / "llama_gqa"), ids=[3, 1, 4, 1, 5], max_new=2, ignore_eos=True).steps[-1]
    assert step.kv_bytes >= 1024 and step.kv_held >= 1024  # (so the formatter writes a unit, not bytes)
    assert last.endswith(f"K and V at the last step: {format_bytes(step.kv_bytes)} ({step.kv_bytes:,} bytes) "
                         f"for {step.T} tokens; held with their arrays' room for the next positions: "
                         f"{format_bytes(step.kv_held)} ({step.kv_held:,} bytes)"), last


def test_the_help_says_what_plain_output_prints_and_that_only_json_reports_each_step(capsys):
    """Plain output is the text and one summary line (no per-step tokens, top-5 or bytes): the help
    says so, and that the per-step reports are --json's."""
    import re

    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    said = re.sub(r"\s+", " ", capsys.readouterr().out)
    assert ("Prints the prompt with the new tokens, then one line: how many were made, why it stopped, "
            "and the bytes of K and V at the last step") in said
    assert "Only --json reports each step: its token, the model's top-5" in said
    assert "print the run as JSON, with every step's report" in said
    assert main(["generate", "--model", str(FIXTURES / "llama_gqa"), "--ids", "3,1,4,1,5", "--max-new", "3",
                 "--ignore-eos"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("-- 3 new tokens: "), lines
