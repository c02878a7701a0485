"""Numbers as text for the comparison reports (:mod:`bench.report.sweep_page`, :mod:`bench.report.compare_page`).

Pure functions of their arguments; no third-party imports. What counts as missing and how a
parameter value is labelled are the results model's (:mod:`bench.results.values`).
"""

from __future__ import annotations

import math
from typing import Any

from bench.results.values import is_missing

NA = "n/a"


def fmt_num(v: Any, decimals: int = 0) -> str:
    """Thousands-separated number with fixed decimals, or 'n/a'; text that is not a number as is."""
    if is_missing(v):
        return NA
    try:
        return f"{float(v):,.{decimals}f}"
    except (TypeError, ValueError):
        return str(v)


def fmt_sig(v: Any) -> str:
    """About three significant figures, never in exponent form: 3354.2 -> '3,354', 0.01234 -> '0.0123'."""
    if is_missing(v):
        return NA
    v = float(v)
    if v == 0 or abs(v) >= 100:
        return f"{v:,.0f}"
    decimals = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"
