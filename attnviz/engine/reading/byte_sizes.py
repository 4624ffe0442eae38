"""How a size in bytes is written, the one way everywhere it is shown (the Calculator, memory lines,
refusals, the command line): binary units, labelled so, from 1 KiB; a count of bytes below it."""

from __future__ import annotations

from attnviz.engine.reading.token_text import plural

BINARY_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB")
ROUNDINGS = ("nearest", "up", "down")


def format_bytes(n: int, rounding: str = "nearest") -> str:
    """`2147483648` -> `2 GiB`; `1152` -> `1.12 KiB`; 168.4 MiB -> `168.4 MiB`; `1` -> `1 byte`:
    3 significant digits below 100 (two decimals below 10, one below 100) and one decimal from
    100 on, in binary units. A trailing zero is never written, so a size that rounds to a whole
    number reads as that number does (`168 MiB` for 168 MiB and for 168.04 MiB, never `168.0
    MiB` beside it). `rounding` "up" never shows less than n (what a refusal says is needed, or
    is over a limit), "down" never more (what is available); "nearest" is off by at most half
    the last digit."""
    if rounding not in ROUNDINGS:
        raise ValueError(f"rounding {rounding!r} is not one of {', '.join(ROUNDINGS)}")
    n = int(n)
    if abs(n) < 1024:
        return plural(n, "byte")
    unit = 1
    while unit < len(BINARY_UNITS) - 1 and abs(n) >= 1024 ** (unit + 1):
        unit += 1
    text = _digits(n, 1024 ** unit, rounding)
    if text.lstrip("-") == "1024" and unit < len(BINARY_UNITS) - 1:  # 1023.96 KiB reads 1 MiB
        unit += 1
        text = _digits(n, 1024 ** unit, rounding)
    return f"{text} {BINARY_UNITS[unit]}"


def _digits(n: int, scale: int, rounding: str) -> str:
    """n / scale (1 <= |n / scale| < 1024, or just 1024 when rounded) with 2 decimals below 10 and 1
    from there, rounded as `rounding` says, trailing zeros dropped."""
    places = 2 if abs(n) < 10 * scale else 1
    if rounding == "nearest":  # the float's own rounding, as f"{x:.3g}" writes 1.125 as 1.12
        text = f"{n / scale:.{places}f}"
    else:  # exact: integer division, so a whole number of units is never pushed up by a float's error
        steps = n * 10 ** places
        q = -(-steps // scale) if rounding == "up" else steps // scale
        sign, q = ("-" if q < 0 else ""), abs(q)
        text = f"{sign}{q // 10 ** places}.{q % 10 ** places:0{places}d}"
    return text.rstrip("0").rstrip(".")
