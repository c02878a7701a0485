"""Values as text on the run report: numbers with units, settings. Pure functions; numbers are
:func:`bench.report.format.fmt_num`'s."""

from __future__ import annotations

import json
from typing import Any

from bench.report.format import NA, is_missing

__all__ = ["NA", "as_int", "engine_capability", "fmt_value"]


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
        return None if is_missing(v) else int(v)
    except (TypeError, ValueError):
        return None


#: The engine capabilities the report reads, for a run written before run.json recorded them
#: (``engine_capabilities``): by the engine its config names (PostgreSQL's when it names none).
_BEFORE_RECORDED = {"postgres": {"vacuum": True, "statement_stats": True, "table_rows_estimated": False},
                    "mariadb": {"vacuum": False, "statement_stats": False, "table_rows_estimated": True}}


def engine_capability(summary: dict, name: str) -> Any:
    """The flag ``name`` of the run's engine (:class:`bench.engines.base.Capabilities`) as run.json's
    ``engine_capabilities`` recorded it; for an older run, what its engine had then."""
    recorded = summary.get("engine_capabilities") or {}
    if name in recorded:
        return recorded[name]
    engine = (summary.get("config") or {}).get("engine") or "postgres"
    return _BEFORE_RECORDED.get(engine, _BEFORE_RECORDED["postgres"])[name]
