"""Values as text on the run report (:mod:`bench.report.run_page`): numbers with units, settings.

Pure functions of their arguments. Unlike :func:`bench.results.values.is_missing` (used by the
sweep and compare pages), a value counts as missing here only when it is None or a float NaN:
text such as ``"nan"`` is shown as it is.
"""

from __future__ import annotations

import json
import math
from typing import Any

from bench.report.format import NA

__all__ = ["NA", "as_int", "fmt_num", "fmt_us_as_ms", "fmt_value", "is_none_or_nan"]


def is_none_or_nan(v: Any) -> bool:
    """True for None and a float NaN; False for any other value (text and ints included)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def fmt_num(v: Any, decimals: int = 0, unit: str = "") -> str:
    """Thousands-separated number with a fixed number of decimals and an optional unit after a space
    (``1234.5, 1, "s"`` -> ``'1,234.5 s'``); 'n/a' when missing; text that is not a number as is."""
    if is_none_or_nan(v):
        return NA
    try:
        text = f"{float(v):,.{decimals}f}"
    except (TypeError, ValueError):
        return str(v)
    return f"{text} {unit}" if unit else text


def fmt_us_as_ms(v: Any) -> str:
    """Microseconds shown as milliseconds with microsecond precision: 412 -> '0.412 ms'."""
    return NA if is_none_or_nan(v) else fmt_num(float(v) / 1000.0, 3, "ms")


def fmt_value(v: Any) -> str:
    """Config/setting value as text: None as 'n/a', booleans as yes/no, other scalars as-is,
    containers as compact JSON with sorted keys."""
    if v is None:
        return NA
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (dict, list, tuple)):
        return json.dumps(v, sort_keys=True)
    return str(v)


def as_int(v: Any) -> int | None:
    """``int(v)``, or None when ``v`` is missing or does not convert."""
    try:
        return None if is_none_or_nan(v) else int(v)
    except (TypeError, ValueError):
        return None
