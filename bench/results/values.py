"""Cell values as the results model holds them: what counts as missing, numbers, and parameter labels. Pure
functions, no third-party imports."""

from __future__ import annotations

import math
from typing import Any

#: What a queue library's figures are when queue-bench's own workers send its SQL (``LIBRARY_MODE=sql``):
#: the run report's red line, the comparison page's note.
LIBRARY_SQL_PATH_CAVEAT = (
    "these figures measure the library's SQL statements sent by queue-bench's own workers, not the library's "
    "own worker: its event loop, its fetch, dispatch and completion strategy, job context, heartbeats and "
    "wake-ups are not run. Its own worker may do much better or much worse on the same database; do not "
    "choose a library from these figures")


def library_caveat_line(summary: dict) -> str | None:
    """The line a queue library's run on its SQL path is shown with (report banner, terminal), or None (not a
    library, or its own worker); a summary without ``mode``/``caveat`` (older files: always the SQL path) gets
    :data:`LIBRARY_SQL_PATH_CAVEAT`."""
    library = (summary.get("queue_definition") or {}).get("library")
    if not library or library.get("mode") == "worker":
        return None
    return f"{library['package']} driven on its SQL path: {library.get('caveat') or LIBRARY_SQL_PATH_CAVEAT}"


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


def fmt_sig(v: Any) -> str:
    """About three significant figures, never in exponent form: 3354.2 -> '3,354', 0.01234 -> '0.0123';
    'n/a' when missing. The one number style of the terminal's end block and the reports."""
    if is_missing(v):
        return "n/a"
    v = float(v)
    if v == 0 or abs(v) >= 100:
        return f"{v:,.0f}"
    decimals = max(0, 2 - int(math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"


def fmt_seconds(v: Any) -> str:
    """A time in seconds with the unit that keeps it at or above 1 (s, ms, µs), three significant
    figures: 0.008815 -> '8.82 ms', 2.5 -> '2.50 s'; 'n/a' when missing."""
    if is_missing(v):
        return "n/a"
    v = float(v)
    if v == 0:
        return "0 s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms")):
        if abs(v) >= scale:
            return f"{fmt_sig(v / scale)} {unit}"
    return f"{fmt_sig(v / 1e-6)} µs"


def fmt_label(v: Any) -> str:
    """A parameter value for labels: 1000000 -> '1,000,000', 2.5 -> '2.5', True -> 'yes', 'skip_locked' as is."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v is None:
        return str(v)
    if isinstance(v, (int, float)):
        return f"{v:,.0f}" if float(v).is_integer() else f"{v:,g}"
    return str(v)


#: Each engine of ``config.engine`` by its name in prose.
ENGINE_NAMES = {"postgres": "PostgreSQL", "mariadb": "MariaDB"}


def engine_name(engine: Any) -> str:
    """The engine of ``config.engine`` in prose ('postgres' -> 'PostgreSQL'); an unknown one as given,
    and 'PostgreSQL' when missing (result files written before the engine was recorded)."""
    if is_missing(engine) or engine == "":
        return ENGINE_NAMES["postgres"]
    return ENGINE_NAMES.get(str(engine), str(engine))
