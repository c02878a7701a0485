"""``AUTOVACUUM_SETTINGS``: the queue table's autovacuum storage parameters, with the ranges PostgreSQL 15 accepts
(``src/backend/access/common/reloptions.c``;
https://www.postgresql.org/docs/current/sql-createtable.html#SQL-CREATETABLE-STORAGE-PARAMETERS), checked against the
server by ``tests/test_vacuum.py``. Standard library only."""

from __future__ import annotations

from typing import Any

from bench.errors import ConfigError
from bench.usage import switch

PARAM = "AUTOVACUUM_SETTINGS"
PREFIX = "autovacuum_"
INT_MAX = 2_147_483_647

#: Full name -> (kind ``int`` or ``real``, minimum, maximum, what it sets).
SETTINGS: dict[str, tuple[str, float, float, str]] = {
    "autovacuum_vacuum_threshold": ("int", 0, INT_MAX, "dead tuples before a vacuum, plus the scale factor's share"),
    "autovacuum_vacuum_scale_factor": ("real", 0.0, 100.0, "share of the table's rows added to the vacuum threshold"),
    "autovacuum_vacuum_insert_threshold": ("int", -1, INT_MAX, "inserted tuples before a vacuum (-1: never for inserts)"),
    "autovacuum_vacuum_insert_scale_factor": ("real", 0.0, 100.0, "share of rows added to the insert threshold"),
    "autovacuum_analyze_threshold": ("int", 0, INT_MAX, "changed tuples before an analyze, plus the scale factor's share"),
    "autovacuum_analyze_scale_factor": ("real", 0.0, 100.0, "share of the table's rows added to the analyze threshold"),
    "autovacuum_vacuum_cost_delay": ("real", 0.0, 100.0, "ms autovacuum sleeps each time it spends its cost limit"),
    "autovacuum_vacuum_cost_limit": ("int", 1, 10_000, "cost autovacuum may spend before it sleeps"),
}


def short_names() -> str:
    """The settings' names without the prefix, comma-separated."""
    return ", ".join(name.removeprefix(PREFIX) for name in SETTINGS)


def _allowed() -> str:
    return f"{short_names()} (with or without the {PREFIX} prefix), as name=value,..."


def _value(full: str, raw: Any) -> int | float:
    """``raw`` as the setting ``full`` takes it, in range; ConfigError naming the setting."""
    kind, low, high, _ = SETTINGS[full]
    want = (f"an integer from {int(low)} to {int(high)}" if kind == "int" else f"a number from {low:g} to {high:g}")
    short = full.removeprefix(PREFIX)
    if isinstance(raw, bool):
        raise ConfigError(PARAM, f"{short}={raw!r} is not a number; allowed: {want} for {short}")
    try:
        if kind == "int":
            if isinstance(raw, float):
                if not raw.is_integer():
                    raise ValueError
                raw = int(raw)
            value: int | float = int(str(raw).strip().replace("_", ""))
        else:
            value = float(str(raw).strip())
    except ValueError:
        raise ConfigError(PARAM, f"{short}={raw!r} is not {'an integer' if kind == 'int' else 'a number'}; "
                                 f"allowed: {want} for {short}") from None
    if not (low <= value <= high):  # NaN fails this too
        raise ConfigError(PARAM, f"{short}={raw!r} is out of range; allowed: {want} for {short}")
    return value


def parse_autovacuum_settings(value: Any) -> tuple[tuple[str, int | float], ...]:
    """``"vacuum_scale_factor=0,vacuum_threshold=1000"`` or a TOML table → ``(("autovacuum_vacuum_scale_factor", 0.0),
    ("autovacuum_vacuum_threshold", 1000))``, sorted by full name; ``""`` or ``{}`` → ``()``. Raises ConfigError
    (``AUTOVACUUM_SETTINGS``) for a malformed, unknown, repeated or out-of-range item."""
    if value is None or value == "" or value == {}:
        return ()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, str):
        items = []
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, raw = part.partition("=")
            if not sep or not name.strip() or not raw.strip():
                raise ConfigError(PARAM, f"{part!r} is not name=value; allowed: {_allowed()}")
            items.append((name, raw))
    else:
        raise ConfigError(PARAM, f"{value!r} is not allowed; allowed: {_allowed()}")
    out: dict[str, int | float] = {}
    for name, raw in items:
        given = str(name).strip().lower()
        full = given if given.startswith(PREFIX) else PREFIX + given
        if full == "autovacuum_enabled":
            raise ConfigError(PARAM, f"{given!r} is set by {switch('autovacuum')} / {switch('autovacuum', False)}; allowed: "
                                     f"{_allowed()}")
        if full not in SETTINGS:
            raise ConfigError(PARAM, f"unknown setting {given!r}; allowed: {_allowed()}")
        if full in out:
            raise ConfigError(PARAM, f"{full.removeprefix(PREFIX)} is given twice; allowed: each setting once, "
                                     f"from {short_names()}")
        out[full] = _value(full, raw)
    return tuple(sorted(out.items()))

