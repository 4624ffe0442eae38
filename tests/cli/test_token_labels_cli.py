"""Tokens on the command line read as the window labels them (engine/reading/token_text): a
byte-level piece "Ġthe" prints as ·the, a byte of a split character as <C3>, in every table and
message; the raw pieces appear only in --json, beside the labels."""

import json


from attnviz.engine import load_model

TEXT = "é the"  # é is two byte tokens (Ã ©: <C3> <A9>é), " the" one (Ġthe: ·the)
RAW_ONLY = {chr(c) for c in range(0x100, 0x144)}  # the byte-level alphabet's stand-ins (Ġ, Ċ, ...)


def _no_raw_piece(text):
    assert not RAW_ONLY & set(text), text
    assert "Ã" not in text and "'©'" not in text, text


def test_the_tokens_read_as_labels(tiny):
    model = load_model(tiny)
    r = model.run(TEXT)
    assert r.tokens == ["Ã", "©", "Ġthe"] and r.labels == ["<C3>", "<A9>é", "·the"]


def test_predict_prints_labels_and_keeps_the_raw_pieces_in_json(tiny, cli):
    rc, out, err = cli("predict", "--model", tiny, "--text", TEXT, "--top", "20")
    assert rc == 0, err
    _no_raw_piece(out)
    lines = out.splitlines()
    assert lines[0].endswith("after token 2 '·the'"), lines[0]
    model = load_model(tiny)
    labels = model.tokenizer.labels_for_ids
    for line in lines[1:21]:  # the top rows: id, then the id's label
        i, rest = line.split(None, 1)
        assert rest.startswith(labels([int(i)])[1][0] + " "), line
    rc, out, _ = cli("predict", "--model", tiny, "--text", TEXT, "--json")
    doc = json.loads(out)
    assert doc["tokens"] == ["Ã", "©", "Ġthe"] and doc["labels"] == ["<C3>", "<A9>é", "·the"]
    assert f"logit('{doc['target_token']}' ({doc['target']}))" in \
        cli("predict", "--model", tiny, "--text", TEXT)[1]


def test_ablation_scan_names_its_token_by_label(tiny, cli):
    rc, out, err = cli("ablation-scan", "--model", tiny, "--text", TEXT, "--threads", "1")
    assert rc == 0, err
    _no_raw_piece(out)
    assert "after token 2 '·the'" in out.splitlines()[0]
    doc = json.loads(cli("ablation-scan", "--model", tiny, "--text", TEXT, "--threads",
                         "1", "--json")[1])
    assert doc["tokens"] == ["Ã", "©", "Ġthe"] and doc["labels"] == ["<C3>", "<A9>é", "·the"]


def test_find_and_refusals_name_tokens_by_label(tiny, cli):
    rc, out, err = cli("find", "--model", tiny, "--text", TEXT, "--from", "the",
                       "--to", "<C3>", "--top", "3")
    assert rc == 0, err
    assert out.splitlines()[0].startswith(f"{load_model(tiny).name}: from '·the'@2 (query) to "
                                          "'<C3>'@0 (key)")
    rc, _, err = cli("predict", "--model", tiny, "--text", TEXT, "--target", TEXT)
    assert rc == 2
    _no_raw_piece(err)
    assert "is 3 tokens ('<C3>', '<A9>é', '·the')" in err
    rc, _, err = cli("find", "--model", tiny, "--text", TEXT, "--from", "the@0",
                     "--to", "the")
    assert rc == 2 and "position 0 holds '<C3>', not 'the'" in err


def test_qk_attribution_names_its_cell_by_labels(tiny, cli):
    rc, out, err = cli("qk-attribution", "--model", tiny, "--text", TEXT, "--layer", "1",
                       "--head", "0", "--query", "2", "--key", "1")
    assert rc == 0, err
    _no_raw_piece(out)
    assert "query 2 '·the' -> key 1 '<A9>é'" in out.splitlines()[0]
    doc = json.loads(cli("qk-attribution", "--model", tiny, "--text", TEXT, "--layer", "1",
                         "--head", "0", "--query", "2", "--key", "1", "--json")[1])
    assert doc["tokens"] == ["Ã", "©", "Ġthe"] and doc["labels"] == ["<C3>", "<A9>é", "·the"]


def test_patch_and_compare_name_tokens_by_labels(tiny, cli):
    rc, out, err = cli("patch", "--model", tiny, "--clean", "é the", "--corrupt", "é t",
                       "--what", "resid", "--position", "2")
    assert rc == 0, err
    _no_raw_piece(out)
    assert "at token 2 '·the'" in out.splitlines()[0]
    assert "L0 at 2 '·the'/'·t'" in out, out  # the swapped position, both tokens
    rc, out, err = cli("compare", "--model", tiny, "--against", tiny, "--text", TEXT)
    assert rc == 0, err
    _no_raw_piece(out)
    assert "3 tokens: '<C3>' '<A9>é' '·the'" in out
    doc = json.loads(cli("compare", "--model", tiny, "--against", tiny, "--text", TEXT,
                         "--json")[1])
    assert doc["tokens"] == ["Ã", "©", "Ġthe"] and doc["labels"] == ["<C3>", "<A9>é", "·the"]


TRICKY = "x '\\' \u6770"  # a quote, a backslash and byte pieces: x ␣ ' \ ' ␣ <E6> <9D> <B0>杰


def test_circuits_names_the_source_token_by_label(tiny, cli):
    """--token as typed ("\\" and the raw piece "Ã") prints as the window labels it, with its id."""
    model = load_model(tiny)
    for typed, label in (("\\", "\\"), ("\u00c3", "<C3>")):
        i = model.tokenizer.raw.token_to_id(typed)
        rc, out, err = cli("circuits", "--model", tiny, "--head", "1.0", "--token", typed)
        assert rc == 0, err
        _no_raw_piece(out)
        assert f"head 1.0 attending to '{label}' ({i}) writes: '" in out, out


def test_heads_writes_the_text_between_quotes_without_escapes(tiny, cli):
    rc, out, err = cli("heads", "--model", tiny, "--text", TRICKY)
    assert rc == 0, err
    assert out.splitlines()[0].endswith(f"; text \u201c{TRICKY}\u201d"), out.splitlines()[0]
