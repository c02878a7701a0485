"""Values as text on the run report (:mod:`bench.report.run_page`): numbers with units, settings.

Pure functions of their arguments. Numbers are :func:`bench.report.format.fmt_num`'s. Unlike
:func:`bench.results.values.is_missing`, :func:`is_none_or_nan` counts a value as missing only when it is
None or a float NaN (text such as ``"nan"`` is not).
"""

from __future__ import annotations

import json
import math
from typing import Any

from bench.report.format import NA, fmt_num

__all__ = ["NA", "as_int", "fmt_us_as_ms", "fmt_value", "is_none_or_nan"]


def is_none_or_nan(v: Any) -> bool:
    """True for None and a float NaN; False for any other value (text and ints included)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


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
