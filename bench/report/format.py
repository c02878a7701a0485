"""Numbers as text for the comparison reports; pure functions, no third-party imports (what counts as missing:
:mod:`bench.results.values`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from bench.results.values import fmt_sig, is_missing  # noqa: F401 - fmt_sig: read from here too

if TYPE_CHECKING:
    from bench.results.sweep import Stat

NA = "n/a"


def fmt_num(v: Any, decimals: int = 0, unit: str = "") -> str:
    """Thousands-separated number with ``decimals`` fixed decimals and an optional unit after a space
    (``1234.5, 1, "s"`` -> ``'1,234.5 s'``); a missing value (:func:`bench.results.values.is_missing`) is
    'n/a' without the unit; text that is not a number is returned as is."""
    if is_missing(v):
        return NA
    try:
        text = f"{float(v):,.{decimals}f}"
    except (TypeError, ValueError):
        return str(v)
    return f"{text} {unit}" if unit else text


def ci_text(stat: Stat, scale: float = 1.0, fmt: Callable[[Any], str] = fmt_sig) -> str:
    """'mean (low–high)' of a Stat divided by ``scale``, each number as ``fmt`` writes it; 'mean (n = 1)'
    when there is no interval, 'n/a' when there is no value."""
    if stat.n == 0:
        return NA
    mean = fmt(stat.mean / scale)
    if stat.n == 1 or is_missing(stat.low):
        return f"{mean} (n = 1)"
    return f"{mean} ({fmt(stat.low / scale)}–{fmt(stat.high / scale)})"


def stat_text(cell: Any, column: str) -> str:
    """:func:`ci_text` of a sweep cell's ``column`` over its finished runs (``cell.stat``); a ``*_us`` column in ms."""
    return ci_text(cell.stat(column), 1000.0 if column.endswith("_us") else 1.0)


def stat_texts(cell: Any, **columns: str) -> dict[str, str]:
    """``{name: stat_text(cell, column)}`` for each ``name=column``."""
    return {name: stat_text(cell, column) for name, column in columns.items()}


def _bytes_unit(v: float) -> tuple[float, str]:
    """(bytes per unit, unit name) of the largest binary unit not above ``abs(v)`` bytes: GiB, MiB, kiB or B."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "kiB")):
        if abs(v) >= scale:
            return scale, unit
    return 1.0, "B"


def ci_bytes_text(stat: Stat) -> str:
    """Like :func:`ci_text` for a size in bytes, in the binary unit of its mean: '1.23 (1.20–1.26) MiB'."""
    if stat.n == 0:
        return NA
    scale, unit = _bytes_unit(stat.mean)
    return f"{ci_text(stat, scale)} {unit}"


def ms_text(us: Any) -> str:
    """Microseconds as milliseconds, three significant figures (no unit); 'n/a' when missing."""
    return NA if is_missing(us) else fmt_sig(float(us) / 1000.0)
