"""Sizes are written one way everywhere (byte_sizes.format_bytes), and a refusal's figures never
claim less than is needed, or more than is there, by their rounding."""

import pytest

from attnviz.engine.calc import format_bytes as calc_format_bytes
from attnviz.engine.errors import BudgetTooSmall, InputError, ModelLoadError
from attnviz.engine.reading import memory_budget as MB
from attnviz.engine.reading.byte_sizes import format_bytes

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def test_three_significant_digits_in_binary_units_with_no_trailing_zero():
    assert calc_format_bytes is format_bytes  # the Calculator writes sizes as the rest of the app
    assert [format_bytes(n) for n in (0, 1, 2, 1023, 1024, 1152, 552_960)] == [
        "0 bytes", "1 byte", "2 bytes", "1,023 bytes", "1 KiB", "1.12 KiB", "540 KiB"]
    assert format_bytes(41 * MIB + 500_000) == "41.5 MiB"  # (not "41 MiB", half a MiB low)
    assert format_bytes(72 * GIB) == "72 GiB" and format_bytes(2 * GIB) == "2 GiB"
    assert format_bytes(int(168.4 * MIB)) == "168.4 MiB" and format_bytes(168 * MIB + 40_000) == "168 MiB"
    assert format_bytes(MIB - 1) == "1 MiB"  # (rounds to 1024 KiB: the next unit)
    assert format_bytes(10 * KIB - 1) == "10 KiB" and format_bytes(10 * KIB - 1, "down") == "9.99 KiB"


def test_rounding_up_never_shows_less_and_down_never_more():
    for n in (1024 + 1, GIB + 1, 5 * GIB + 7 * MIB + 3, MIB - 1, 100 * KIB - 1, 12_544):
        for rounding, keeps in (("up", lambda shown: shown >= n), ("down", lambda shown: shown <= n)):
            value, unit = format_bytes(n, rounding).split()
            assert keeps(float(value) * {"KiB": KIB, "MiB": MIB, "GiB": GIB}[unit]), (n, rounding, value, unit)
    assert format_bytes(GIB + 1, "up") == "1.01 GiB" and format_bytes(GIB + 1, "down") == "1 GiB"
    assert format_bytes(2 * GIB, "up") == "2 GiB" == format_bytes(2 * GIB, "down")  # exact: no float's error
    with pytest.raises(ValueError, match="rounding 'sideways'"):
        format_bytes(1, "sideways")


def test_a_load_refused_for_memory_shows_more_needed_than_available(monkeypatch):
    """Needed and available 1 MiB apart, both about 1 GiB: to the nearest, both would read "1 GiB"."""
    import attnviz.engine.reading.weights as weights

    monkeypatch.setattr(weights, "available_memory", lambda: GIB + MIB)
    with pytest.raises(ModelLoadError, match=r"needs about 1.01 GiB .* but only 1 GiB of memory"):
        MB.resolve_budget("big", [GIB + 2 * MIB])
    with pytest.raises(BudgetTooSmall, match=r"budget of 1 GiB is less than one layer expanded to "
                                             r"float32 \(1.01 GiB\); give at least that much"):
        MB.resolve_budget("big", [GIB + 2 * MIB], budget=GIB + MIB)


def test_a_dense_request_over_its_limit_reads_over_it(monkeypatch):
    from attnviz.engine.computing.longdoc import DenseTooLarge

    exc = DenseTooLarge((1, 1, 1, 1), 2 * GIB + 1, "ask for less", limit=2 * GIB)
    assert "float32 = 2.01 GiB, over the 2 GiB limit: ask for less" in str(exc)
    assert isinstance(exc, InputError)


def test_a_refused_second_model_reads_its_room_as_its_own_refusal_does():
    """The room a chosen budget leaves B (1.006 MiB: 1.01 to the nearest) reads as the budget B's
    own refusal names, in one line."""
    import re

    from attnviz.engine import load_model
    from attnviz.engine.analysing.pair_memory import load_second
    from attnviz.engine.errors import AttnvizError
    from tiny import FIXTURES

    a = load_model(FIXTURES / "llama_gqa")
    left = MIB + 6 * KIB
    MB.set_memory_budget(a.weights.layers.held_bytes() + left)
    try:
        with pytest.raises(AttnvizError) as refused:
            load_second(lambda budget: MB.resolve_budget("B", [budget + KIB], budget=budget), a, "B")
    finally:
        MB.set_memory_budget(None)
    said = str(refused.value)
    room, own = re.search(r"in the (\S+ \S+) of the .*\. For B, a memory budget of (\S+ \S+) is less", said).groups()
    assert room == own == "1 MiB", said
