"""Parsers for run parameter values (text or TOML values); each returns the typed value or raises ConfigError
naming the parameter (upper case) and what is allowed."""

from __future__ import annotations

import re
from typing import Any

from bench.config.choices import PG_VERSIONS, PG_VERSIONS_WITHOUT_WHEEL
from bench.errors import ConfigError
from bench.usage import option

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_DURATION_ALLOWED = "a number with a unit ms, s, m or h (e.g. 30s, 2m), or a number of seconds"


def parse_duration_s(param: str, value: Any) -> float:
    """``"30s"``, ``"2m"``, ``"500ms"``, ``"1h"`` or a plain number → seconds (float). Raises ConfigError."""
    if isinstance(value, bool):
        raise ConfigError(param, f"{value!r} is not a duration; allowed: {_DURATION_ALLOWED}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if not m:
            raise ConfigError(param, f"{value!r} is not a duration; allowed: {_DURATION_ALLOWED}")
        seconds = float(m.group(1)) * _DURATION_UNIT_S[m.group(2)]
    return seconds


def whole_seconds(param: str, raw: Any, seconds: float) -> None:
    """Raise ConfigError for a duration (s) that is not a whole number of seconds."""
    if abs(seconds - round(seconds)) > 1e-9:
        raise ConfigError(param, f"{raw!r} is not a whole number of seconds; allowed: whole seconds, e.g. "
                                 "5s, 30s, 2m (the run measures in one-second intervals)")


def _bound(number: float) -> str:
    """A range's bound as a refusal writes it: ``1000000``, ``0.5``."""
    return str(int(number)) if number == int(number) else f"{number:g}"


def int_allowed(minimum: int, maximum: int | None = None) -> str:
    """What :func:`parse_int` allows, in words: ``an integer from 1 to 1000`` or ``an integer >= 0``."""
    return f"an integer {f'>= {_bound(minimum)}' if maximum is None else f'from {_bound(minimum)} to {_bound(maximum)}'}"


def number_allowed(minimum: float, strict: bool = False, maximum: float | None = None) -> str:
    """What :func:`parse_number` allows, in words: ``a number > 0 and <= 1000000``."""
    return (f"a number {'>' if strict else '>='} {_bound(minimum)}"
            + (f" and <= {_bound(maximum)}" if maximum is not None else ""))


def parse_int(param: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    """An integer in [``minimum``, ``maximum``] (no upper bound when None); ``1_000`` allowed, a bool or a
    fraction not. Raises ConfigError: ``<value> is not an integer`` or ``is out of range``, then
    :func:`int_allowed`."""
    allowed = int_allowed(minimum, maximum)
    if isinstance(value, bool):
        raise ConfigError(param, f"{value!r} is not an integer; allowed: {allowed}")
    try:
        number = int(str(value).replace("_", "")) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(param, f"{value!r} is not an integer; allowed: {allowed}") from None
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigError(param, f"{number} is out of range; allowed: {allowed}")
    return number


def parse_number(param: str, value: Any, *, minimum: float, strict: bool = False,
                 maximum: float | None = None) -> float:
    """A finite number >= ``minimum`` (> with ``strict``), <= ``maximum`` when given. Raises ConfigError:
    ``<value> is not a number`` or ``is out of range``, then :func:`number_allowed`."""
    allowed = number_allowed(minimum, strict, maximum)
    if isinstance(value, bool):
        raise ConfigError(param, f"{value!r} is not a number; allowed: {allowed}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(param, f"{value!r} is not a number; allowed: {allowed}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ConfigError(param, f"{value!r} is not a finite number; allowed: {allowed}")
    if (number <= minimum if strict else number < minimum) or (maximum is not None and number > maximum):
        raise ConfigError(param, f"{value} is out of range; allowed: {allowed}")
    return number


def parse_share(param: str, value: Any) -> float:
    """A fraction from 0 to 1. Raises ConfigError."""
    try:
        number = parse_number(param, value, minimum=0.0)
    except ConfigError:
        number = float("nan")
    if not 0 <= number <= 1:
        raise ConfigError(param, f"{value!r} is out of range; allowed: a fraction from 0 to 1")
    return number


def parse_priority_mix(value: Any) -> tuple[tuple[int, float], ...]:
    """``{"0" = 0.9, "1" = 0.1}`` (TOML table) or ``"0:0.9,1:0.1"`` → ((0, 0.9), (1, 0.1)), weights normalised."""
    allowed = "a table of priority = weight, e.g. {\"0\" = 0.9, \"1\" = 0.1}, or 0:0.9,1:0.1"
    try:
        items = value.items() if isinstance(value, dict) else [p.split(":") for p in str(value).split(",")]
        pairs = [(int(k), float(w)) for k, w in items]
    except (ValueError, TypeError, AttributeError):
        raise ConfigError("PRIORITY_MIX", f"{value!r} is not allowed; allowed: {allowed}") from None
    if len({p for p, _ in pairs}) != len(pairs):
        raise ConfigError("PRIORITY_MIX", f"{value!r} names a priority twice; allowed: {allowed}")
    total = sum(w for _, w in pairs)
    if not pairs or not 0 < total < float("inf") or any(w < 0 or w != w for _, w in pairs) or any(not -32768 <= p <= 32767 for p, _ in pairs):
        raise ConfigError("PRIORITY_MIX", f"{value!r} is not allowed; allowed: {allowed} (weights >= 0, some > 0)")
    return tuple(sorted((p, w / total) for p, w in pairs))


def parse_bursts(value: Any) -> tuple[tuple[float, float, float], ...]:
    """``[{start_s, end_s, rate}]`` (TOML) or ``"start-end@rate;..."`` → ((start_s, end_s, jobs/s), ...), seconds
    since the measured start."""
    allowed = "start-end@rate items separated by ';' (seconds since measured start, jobs/s), e.g. 10-15@2000"
    if value in (None, "", []):
        return ()
    try:
        if isinstance(value, (list, tuple)):
            items = [(float(b["start_s"]), float(b["end_s"]), float(b["rate"])) for b in value]
        else:
            items = []
            for part in filter(None, (p.strip() for p in str(value).split(";"))):
                window, _, rate = part.partition("@")
                start, _, end = window.partition("-")
                items.append((float(start), float(end), float(rate)))
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ConfigError("BURSTS", f"{value!r} is not allowed; allowed: {allowed}") from None
    if any(not (0 <= a < b < float("inf")) or not 0 <= r < float("inf") for a, b, r in items):
        raise ConfigError("BURSTS", f"{value!r} is not allowed; allowed: {allowed} with 0 <= start < end, rate >= 0")
    return tuple(items)


def parse_flag(param: str, value: Any) -> bool:
    """A bool, or ``1``/``0`` (Make, TOML integers) → bool. Raises ConfigError."""
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text == "1":
        return True
    if text == "0":
        return False
    raise ConfigError(param, f"{value!r} is not allowed; allowed: true or false (1 or 0)")


def parse_choice(param: str, value: Any, allowed: tuple[str, ...]) -> str:
    """One of ``allowed`` (case-insensitive; returned in lower case). Raises ConfigError."""
    text = str(value).strip().lower()
    if text not in allowed:
        raise ConfigError(param, f"unknown value {value!r}; allowed: {', '.join(allowed)}")
    return text


def parse_pg_version(value: Any) -> str:
    """``PG_VERSION``: one of :data:`PG_VERSIONS` (a TOML integer as its text). Raises ConfigError, saying so for a
    version no server wheel ships."""
    text = str(value).strip().lower()
    if text in PG_VERSIONS_WITHOUT_WHEEL:
        raise ConfigError("PG_VERSION", f"{text}: no server wheel ships PostgreSQL {text}, so no embedded server can "
                                        f"run it; allowed: {', '.join(PG_VERSIONS)}, or {option('dsn')} of a "
                                        f"PostgreSQL {text} server")
    return parse_choice("PG_VERSION", text, PG_VERSIONS)


#: Room left in a 63-byte PostgreSQL identifier for the ``_state`` suffix of a sweep's saved states.
SCHEMA_MAX_LEN = 63 - len("_state")
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]*$")


def parse_schema(value: Any) -> str:
    """A lower-case identifier of at most :data:`SCHEMA_MAX_LEN` characters, not a system schema and not ending
    in ``_state`` (a sweep's saved states). Raises ConfigError (``SCHEMA``)."""
    schema = str(value)
    if not _SCHEMA_RE.match(schema) or len(schema) > SCHEMA_MAX_LEN:
        raise ConfigError("SCHEMA", f"{schema!r} is not allowed; allowed: a lower-case identifier ([a-z_][a-z0-9_]*, "
                                    f"at most {SCHEMA_MAX_LEN} characters)")
    if schema in ("public", "pg_catalog", "information_schema") or schema.startswith("pg_"):
        raise ConfigError("SCHEMA", f"{schema!r} is not the tool's own schema; allowed: a dedicated name such as qbench")
    if schema.endswith("_state"):
        raise ConfigError("SCHEMA", f"{schema!r} ends in _state, which names a sweep's saved states "
                                    "(<schema>_state); allowed: a name not ending in _state, such as qbench")
    return schema


def parse_pg_dsn(name: str, what: str, value: Any) -> str:
    """A PostgreSQL connection string (``postgresql://``, ``postgres://`` or libpq key=value) for parameter
    ``name``, stripped; "" for none; ``what`` it must reach, for the refusal. Raises ConfigError (``name``)."""
    text = str(value).strip()
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if scheme and scheme.group(1).lower() not in ("postgresql", "postgres"):
        raise ConfigError(name, f"scheme {scheme.group(1)!r} is not PostgreSQL's; allowed: a "
                                f"postgresql:// URL or a libpq key=value DSN of {what}")
    if text and not scheme and "=" not in text:
        raise ConfigError(name, f"{text!r} is not a connection string; allowed: a postgresql:// URL or a "
                                f"libpq key=value DSN of {what}")
    return text


def parse_dsn_replica(value: Any) -> str:
    """``DSN_REPLICA``: :func:`parse_pg_dsn` of a hot standby. Raises ConfigError (``DSN_REPLICA``)."""
    return parse_pg_dsn("DSN_REPLICA", "a hot standby", value)


def parse_pooler_admin_dsn(value: Any) -> str:
    """``POOLER_ADMIN_DSN``: :func:`parse_pg_dsn` of a PgBouncer's admin console. Raises ConfigError
    (``POOLER_ADMIN_DSN``)."""
    return parse_pg_dsn("POOLER_ADMIN_DSN", "the pooler's admin console (database pgbouncer)", value)


def parse_dsn_direct(value: Any) -> str:
    """``DSN_DIRECT``: :func:`parse_pg_dsn` of the DSN's server, not through its pooler. Raises ConfigError
    (``DSN_DIRECT``)."""
    return parse_pg_dsn("DSN_DIRECT", "the DSN's server and database reached directly", value)
