"""Values as text for the comparison reports: numbers, parameter values, and what counts as missing.

Shared by :mod:`bench.sweep_results` (cell labels), :mod:`bench.sweep_report` and
:mod:`bench.compare`. Pure functions of their arguments; no third-party imports.
"""

from __future__ import annotations

import math
from typing import Any

NA = "n/a"


def is_missing(v: Any) -> bool:
    """True for None and for anything that converts to float NaN; False for any other value (text too)."""
    if v is None:
        return True
    try:
        return math.isnan(float(v))
    except (TypeError, ValueError):
        return False


def as_float(v: Any) -> float:
    """``float(v)``, or NaN when ``v`` does not convert."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


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


def fmt_label(v: Any) -> str:
    """A parameter value for labels: 1000000 -> '1,000,000', 2.5 -> '2.5', 'skip_locked' as is."""
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, (int, float)):
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:,g}"
    return str(v)
