"""`attnviz models` names the textbook model's vocabulary."""



def test_models_listing_names_the_textbook_vocabulary(capsys):
    from attnviz.cli import main
    from attnviz.engine.reading import textbook

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith(f"{textbook.TEXTBOOK_NAME} knows only"))
    assert line.endswith(" ".join(textbook.WORDS)) and f"these {len(textbook.WORDS)} words" in line
