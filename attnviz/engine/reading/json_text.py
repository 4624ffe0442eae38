"""JSON text as strict parsers read it: a NaN or an infinity is written as null, never as the
NaN / Infinity that Python's json module writes by default and JSON itself does not have. Every
--json output and every exported .json file is written through `dumps`."""

from __future__ import annotations

import json
import math

import numpy as np


def finite(value):
    """`value` with each NaN or infinite float (Python's or NumPy's) as None, in dicts, lists and
    tuples at any depth (a tuple comes back as a list, as JSON writes it anyway)."""
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(doc, **kw) -> str:
    """json.dumps(doc, **kw) with NaN and infinities as null (module docstring)."""
    try:
        return json.dumps(doc, allow_nan=False, **kw)
    except ValueError:  # (a non-finite number somewhere: the document is walked only then)
        return json.dumps(finite(doc), allow_nan=False, **kw)
