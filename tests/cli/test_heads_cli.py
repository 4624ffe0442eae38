"""`attnviz heads` and `attnviz find` on the command line: tables, JSON, probes, errors."""

import numpy as np
from attnviz.engine.analysing import heads as H

# these tests' numbers are MiniLM's (the commands default to the window's model)
MINILM = ("--model", "all-MiniLM-L6-v2")


def test_cli_heads_json_on_text(cli, minilm):
    import json

    text = "The keys to the cabinet are on the table."
    rc, out, _ = cli("heads", *MINILM, "--text", text, "--json")
    assert rc == 0
    doc = json.loads(out)
    hs = H.score_result(minilm.run(text))
    assert doc["labels"] == hs.labels
    assert set(doc["scores"]) == set(H.SCORE_NAMES)
    assert len(doc["scores"]["previous"]) == 6 and len(doc["scores"]["previous"][0]) == 12
    np.testing.assert_allclose(doc["scores"]["previous"], hs.scores["previous"], atol=1e-6)
    assert doc["best"]["previous"]["score"] >= 0.9
    assert doc["best"]["previous"]["strength"] >= doc["best"]["previous"]["score"]
    assert doc["best"]["previous"]["score"] - doc["best"]["previous"]["chance"] >= H.CHANCE_MARGIN
    assert "induction" in doc["no_head_clears"]
    assert "TransformerLens" in doc["definitions"]["previous"]


def test_cli_heads_on_a_text_that_repeats_too_little_names_the_probe_flag(cli):
    # 'the' twice after its first: two duplicate rows, under the three a strength needs
    rc, out, _ = cli("heads", *MINILM, "--text", "The keys to the cabinet are on the table.")
    assert rc == 0
    assert ("duplicate token: No head is labelled duplicate token on this text: only 2 query rows "
            "have a cell of its detection pattern, and a strength needs at least 3; the induction "
            "probe (--probe) repeats every token.") in out


def test_cli_heads_table_on_textbook_probe(cli):
    rc, out, _ = cli("heads", "--model", "attnviz-textbook", "--probe")
    assert rc == 0
    rows = [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("0", "0", "previous"), ("0", "1", "duplicate"), ("0", "2", "self"),
        ("1", "0", "induction"), ("1", "1", "sink"), ("1", "2", "mixed")]
    assert "How the textbook heads were built" in out
    assert "next token: none (a causal model cannot attend ahead)" in out


def test_cli_find_json_and_errors(cli):
    import json

    text = "The keys to the cabinet are on the table."
    rc, out, _ = cli("find", *MINILM, "--text", text, "--from", "are", "--to", "keys", "--json",
                     "--top", "3")
    assert rc == 0
    doc = json.loads(out)
    assert doc["from"] == {"token": "are", "position": 6}
    assert doc["to"] == {"token": "keys", "position": 2}
    assert len(doc["heads"]) == 3
    spec = [h["specificity"] for h in doc["heads"]]
    assert spec == sorted(spec, reverse=True)  # ranked by specificity, weight beside it
    rc, out, err = cli("find", *MINILM, "--text", text, "--from", "are", "--to", "the")
    assert rc == 2 and "occurs 3 times" in err and "the@4" in err
    rc, out, err = cli("find", *MINILM, "--text", text, "--from", "are", "--to", "drawer")
    assert rc == 2 and "'drawer' is not in the text" in err
    rc, out, _ = cli("find", *MINILM, "--text", text, "--from", "are", "--to", "the@4")
    assert rc == 0 and "'the'@4 (key)" in out and len(out.splitlines()) == 2 + 72


def test_cli_heads_syntactic_and_coreference_probes(cli):
    import json

    from attnviz.engine.analysing import probes as P

    rc, out, _ = cli("heads", *MINILM, "--probe", "syntactic", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["probe"] == "agreement" and doc["items"] + doc["skipped"] == P.N_ITEMS
    for hit in doc["labelled"]:  # the numbers printed are the numbers tested
        assert hit["score"] >= P.SCORE_MIN and hit["accuracy"] >= P.ACCURACY_MIN
    rc, out, _ = cli("heads", *MINILM, "--probe", "syntactic")  # its sentences between quotes, no escapes
    assert rc == 0 and [line for line in out.splitlines() if line.startswith("  e.g. ")] == [
        f"  e.g. \u201c{text}\u201d" for text in doc["examples"]]
    rc, out, _ = cli("heads", *MINILM, "--probe", "coreference")
    assert rc == 0 and "coreference probe, seed 0" in out and "Definition: Pronoun -> antecedent" in out
    assert ("head(s) pass" in out) or ("no head passes" in out)


def test_cli_heads_unknown_heavy_text_says_why_no_repeat_roles(cli):
    rc, out, _ = cli("heads", *MINILM, "--text", "I love 🍕 and 寿司! 我喜欢猫，因为它们很可爱。 😀👍🏽 café")
    assert rc == 0 and "tokens are unknown to the vocabulary" in out
    assert "induction: not labelled (too many unknown tokens)" in out
    rows = [line.split() for line in out.splitlines() if line[:5].strip().isdigit()]
    assert not any(r[2] in ("duplicate", "induction") for r in rows)


def _table(out):
    """{(layer, head): (label, {column: (number, marked)})} from the `heads` table, and its two
    header rows."""
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("layer head  label"))
    names, units = lines[at].split()[3:], lines[at + 1].split()
    rows = {}
    for line in lines[at + 2:]:
        parts = line.split()
        if len(parts) != 3 + len(names) or not parts[0].isdigit():
            break
        cells = {n: (float(c.rstrip("*")), c.endswith("*")) for n, c in zip(names, parts[3:])}
        rows[int(parts[0]), int(parts[1])] = (parts[2], cells)
    return names, units, rows


def test_heads_table_prints_the_number_each_label_is_tested_on(cli, smollm2):
    """On SmolLM2's probe, every row's label is the role whose printed number is highest among those
    that clear the threshold (unmarked), 'mixed' when none does; the headers name the number."""
    rc, out, _ = cli("heads", "--model", "SmolLM2-135M-Instruct", "--probe")
    assert rc == 0
    names, units, rows = _table(out)
    assert len(rows) == 30 * 9
    assert units == ["strength"] * len(H.ROLES) + ["tokens", "bits"]
    assert "strength" in out.split("layer head")[0] and "tested on" in out.split("layer head")[0]
    checked = 0
    for (l, h), (label, cells) in rows.items():
        near = any(abs(cells[r][0] - H.THRESHOLDS[r]) < 1e-3 for r in H.ROLES)
        if near:
            continue  # the printed rounding cannot decide this row
        ok = [r for r in H.ROLES if cells[r][0] >= H.THRESHOLDS[r] and not cells[r][1]]
        expect = max(ok, key=lambda r: (cells[r][0], -H.ROLES.index(r))) if ok else H.MIXED
        assert label == expect, (l, h, label, cells)
        checked += 1
    assert checked > 250
    assert any(label == "induction" for label, _ in rows.values())


def test_cli_heads_json_names_no_strongest_head_where_no_row_can_be_scored(cli):
    """A role whose pattern has too few query rows gives no head a strength: the JSON's best is
    null for it, as the table says no head is labelled, rather than L0 H0 at strength 0."""
    import json

    rc, out, _ = cli("heads", "--model", "attnviz-toy-stdlib", "--text", "a b c", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["best"]["duplicate"] is None and doc["best"]["induction"] is None
    assert doc["best"]["next"] is None  # (a causal model: no head can attend to the next token)
    assert doc["best"]["previous"]["strength"] > 0
    rc, out, _ = cli("heads", "--model", "attnviz-toy-stdlib", "--text", "a b c")
    assert "no query row has a cell of its detection pattern" in out


def test_a_strength_just_under_its_threshold_is_never_printed_as_the_threshold(cli):
    """The textbook's L0 H1 and L1 H0 have a sink strength of 0.499992 on this text: under the 0.5
    bar. The table prints it with the decimals that keep it under (0.49999), never as 0.500."""
    import json

    text = "the cat sat on the mat . the cat sat on the mat"
    rc, out, _ = cli("heads", "--model", "attnviz-textbook", "--text", text)
    assert rc == 0
    _, doc, _ = cli("heads", "--model", "attnviz-textbook", "--text", text, "--json")
    sink = np.asarray(json.loads(doc)["strength"]["sink"])
    assert 0.4999 < sink[0, 1] < 0.5 and 0.4999 < sink[1, 0] < 0.5
    names = list(H.SCORE_NAMES)
    for l, h in ((0, 1), (1, 0)):
        row = next(line.split() for line in out.splitlines() if line.split()[:2] == [str(l), str(h)])
        assert row[3 + names.index("sink")] == "0.49999"


def test_a_strength_printed_with_more_decimals_widens_its_column_not_its_row(cli, monkeypatch):
    """A strength strength_text prints with extra decimals (0.49999997, to stay under its 0.5 bar)
    is wider than the other cells: its column widens for every row, so each row's columns start
    where the header's do (a fixed width let that row's later columns shift right)."""
    import re

    score_result = H.score_result

    def under_by_a_hair(*args, **kwargs):
        hs = score_result(*args, **kwargs)
        hs.strength["sink"][0, 1] = 0.49999997
        return hs
    monkeypatch.setattr(H, "score_result", under_by_a_hair)
    rc, out, _ = cli("heads", "--model", "attnviz-textbook", "--text",
                     "the cat sat on the mat . the cat sat on the mat")
    assert rc == 0
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("layer head  label"))
    names = list(H.SCORE_NAMES)
    body = lines[at + 2:at + 2 + 6]
    assert body[1].split()[3 + names.index("sink")] == "0.49999997"

    def anchors(line, header=False):
        """Where each column sits: layer and head end, the label starts, each number ends (before
        its '*' slot; a header name ends on that slot)."""
        words = list(re.finditer(r"\S+", line))
        return ([words[0].end(), words[1].end(), words[2].start()]
                + [w.start() + len(w.group().rstrip("*")) - header for w in words[3:]])
    assert len(body) == 6 and all(len(line.split()) == 3 + len(names) for line in body)
    assert {tuple(anchors(line)) for line in body} == {tuple(anchors(lines[at], header=True))}, \
        "\n".join(lines[at:at + 8])
    units = list(re.finditer(r"\S+", lines[at + 1]))
    assert [u.end() for u in units] == [w.end() for w in re.finditer(r"\S+", lines[at])][3:]
