"""The focus view's note names which tokens the axes label in English ordinals: every 2nd, 21st,
22nd, 23rd, but 11th, 12th, 13th and 111th (the teens take 'th')."""

from attnviz.ui.views.focus import labelled_text

KNOWN = {2: "2nd", 3: "3rd", 4: "4th", 10: "10th", 11: "11th", 12: "12th", 13: "13th", 14: "14th",
         20: "20th", 21: "21st", 22: "22nd", 23: "23rd", 24: "24th", 101: "101st", 102: "102nd",
         103: "103rd", 111: "111th", 112: "112th", 113: "113th", 121: "121st", 1000: "1000th",
         1001: "1001st", 1011: "1011th", 1012: "1012th"}


def _suffix(n: int) -> str:  # the rule, written out by cases
    tens, units = n // 10 % 10, n % 10
    if tens == 1:
        return "th"
    return "st" if units == 1 else "nd" if units == 2 else "rd" if units == 3 else "th"


def test_the_note_names_the_step_as_an_english_ordinal():
    for n, word in KNOWN.items():
        assert f"every {word} query, every {word} key" in labelled_text(n, n)
    for n in range(2, 1200):
        text = labelled_text(n, 1)
        assert text.startswith(f"Labelled: every {n}{_suffix(n)} query, every key"), text
        assert f"every {n}{_suffix(n)} key" in labelled_text(1, n)


def test_no_note_when_every_token_is_labelled():
    assert labelled_text(1, 1) == ""
