"""The Compare view's numbers as CSV: pure Python, no Qt (the command line writes them where Qt's
libraries are missing; figures/compare.py, which paints, imports Qt)."""

from __future__ import annotations

import numpy as np


def csv_text(jsd, jsd_max=None) -> str:
    """layer,head,jsd[,jsd_max] rows, one per head (bits)."""
    jsd = np.asarray(jsd)
    rows = ["layer,head,jsd" + (",jsd_max" if jsd_max is not None else "")]
    for l in range(jsd.shape[0]):
        for h in range(jsd.shape[1]):
            rows.append(f"{l},{h},{float(jsd[l, h])!r}"
                        + (f",{float(np.asarray(jsd_max)[l, h])!r}" if jsd_max is not None else ""))
    return "\n".join(rows) + "\n"
