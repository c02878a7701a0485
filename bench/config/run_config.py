"""Workload files and parameters: load, merge overrides, validate.

A run's effective parameters come from a workload file (``workloads/<name>.toml``,
read with :mod:`tomllib`) overridden by command-line options / Make variables of
the same name. Validation happens before anything touches a database: a bad
value raises :class:`ConfigError`, which the CLI turns into one line and exit
status 2.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any, Mapping

POLICIES = ("wait", "nowait", "skip_locked")
WORK_DISTS = ("fixed", "exponential", "lognormal", "bimodal")
ARRIVALS = ("constant", "poisson")
TXN_MODES = ("short", "hold")
INDEX_VARIANTS = ("none", "status", "composite", "partial", "covering")
#: Where history lives: the queue table, an archive table fed by a mover, or a partition of its own.
LAYOUTS = ("same", "archive", "partitioned")
#: How a prepared claim is planned: PostgreSQL's ``plan_cache_mode`` values, set on the workers'
#: sessions (https://www.postgresql.org/docs/current/runtime-config-query.html#GUC-PLAN-CACHE-MODE).
PLAN_CACHE_MODES = ("auto", "force_custom_plan", "force_generic_plan")
#: Autovacuum on the tool's queue table (a storage parameter of that table only).
AUTOVACUUM_MODES = ("on", "off")

#: Upper bound on workers from one load-generator process; more needs Locust's
#: distributed mode (docs/design.md "Scale-out").
MAX_WORKERS = 1000

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKLOADS_DIR = REPO_ROOT / "workloads"

_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class ConfigError(ValueError):
    """A parameter has a value that is not allowed.

    ``param`` is the parameter's name as the user typed it (upper case, the Make
    variable); ``str(err)`` is one line naming the parameter and what is allowed.
    """

    def __init__(self, param: str, message: str):
        self.param = param
        super().__init__(f"{param}: {message}")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Effective, validated parameters of one run.

    Durations are in seconds (``duration_s``, ``warmup_s``, ``lease_s``), the job
    duration in milliseconds (``work_ms``). ``backlog`` 0 means "compute it"
    (see :func:`bench.runner.compute_backlog`). ``dsn`` None means "start the
    embedded database".
    """

    workload: str = "default"
    policy: str = "skip_locked"
    workers: int = 10
    batch: int = 1
    txn: str = "short"
    work_ms: float = 0.0
    index: str = "partial"
    layout: str = "same"
    history: int = 0
    backlog: int = 0
    duration_s: float = 30.0
    warmup_s: float = 5.0
    lease_s: float = 300.0
    work_dist: str = "fixed"
    work_sigma: float = 0.5
    work_slow_ms: float = 0.0
    slow_share: float = 0.0
    max_attempts: int = 5
    reaper_interval_s: float = 0.0
    fail_prob: float = 0.0
    poison_share: float = 0.0
    retry_base_s: float = 0.1
    retry_cap_s: float = 5.0
    rate: float = 0.0
    arrival: str = "constant"
    producers: int = 1
    priority_mix: tuple = ((0, 1.0),)
    future_share: float = 0.0
    future_delay_ms: float = 0.0
    faults: tuple = ()
    bursts: tuple = ()
    plan_cache: str = "auto"
    prepared: bool = True
    autovacuum: str = "on"
    schema: str = "qbench"
    results: str = "results"
    dsn: str | None = None

    def connections_needed(self) -> int:
        """Connections a run opens besides its admin connection: the workers, the monitor's
        two, the reaper, the producers, the archive mover and the fault windows' own."""
        return (self.workers + 2 + (1 if self.reaper_interval_s > 0 else 0)
                + (self.producers if self.rate > 0 else 0) + (1 if self.layout == "archive" else 0)
                + sum(1 for f in self.faults if f.kind in ("long_transaction", "backend_kill")))

    def public(self) -> dict[str, Any]:
        """The parameters as a JSON-ready dict, with the DSN's password masked."""
        out = dataclasses.asdict(self)
        out["dsn"] = mask_dsn(self.dsn) if self.dsn else None
        return out


def parse_duration_s(param: str, value: Any) -> float:
    """Parse ``"30s"``, ``"2m"``, ``"500ms"``, ``"1h"`` or a plain number of seconds.

    Returns seconds (float). Raises :class:`ConfigError` naming ``param``.
    """
    if isinstance(value, bool):
        raise ConfigError(param, f"{value!r} is not a duration; allowed: a number with a unit ms, s, m or h, e.g. 30s, 2m")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        m = _DURATION_RE.match(str(value))
        if not m:
            raise ConfigError(param, f"{value!r} is not a duration; allowed: a number with a unit ms, s, m or h, e.g. 30s, 2m")
        seconds = float(m.group(1)) * _DURATION_UNIT_S[m.group(2)]
    return seconds


def _whole_seconds(param: str, raw: Any, seconds: float) -> None:
    """Refuse a duration that is not a whole number of seconds (raises :class:`ConfigError`).

    The run measures in one-second intervals from the load start, so the warm-up and the
    measured window are whole numbers of them; 500ms would otherwise be rounded silently."""
    if abs(seconds - round(seconds)) > 1e-9:
        raise ConfigError(param, f"{raw!r} is not a whole number of seconds; allowed: whole seconds, e.g. "
                                 "0s, 5s, 2m (the run measures in one-second intervals)")


def _int(param: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    allowed = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    if isinstance(value, bool):
        raise ConfigError(param, f"{value!r} is not an integer; allowed: an integer {allowed}")
    try:
        number = int(str(value).replace("_", "")) if not isinstance(value, int) else value
    except ValueError:
        raise ConfigError(param, f"{value!r} is not an integer; allowed: an integer {allowed}") from None
    if number < minimum or (maximum is not None and number > maximum):
        raise ConfigError(param, f"{number} is out of range; allowed: an integer {allowed}")
    return number


def _float(param: str, value: Any, *, minimum: float, strict: bool = False) -> float:
    allowed = f"a number {'>' if strict else '>='} {minimum:g}"
    if isinstance(value, bool):
        raise ConfigError(param, f"{value!r} is not a number; allowed: {allowed}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(param, f"{value!r} is not a number; allowed: {allowed}") from None
    if number != number or number == float("inf") or (number <= minimum if strict else number < minimum):
        raise ConfigError(param, f"{value} is out of range; allowed: {allowed}")
    return number


def _share(param: str, value: Any) -> float:
    try:
        number = _float(param, value, minimum=0.0)
    except ConfigError:
        number = float("nan")
    if not 0 <= number <= 1:
        raise ConfigError(param, f"{value!r} is out of range; allowed: a fraction from 0 to 1")
    return number


def _priority_mix(value: Any) -> tuple[tuple[int, float], ...]:
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
    if not pairs or total <= 0 or any(w < 0 or w != w for _, w in pairs) or any(not -32768 <= p <= 32767 for p, _ in pairs):
        raise ConfigError("PRIORITY_MIX", f"{value!r} is not allowed; allowed: {allowed} (weights >= 0, some > 0)")
    return tuple(sorted((p, w / total) for p, w in pairs))


def _bursts(value: Any) -> tuple[tuple[float, float, float], ...]:
    """Producer bursts: ``[{start_s, end_s, rate}]`` (TOML) or ``"start-end@rate;..."`` →
    ((start_s, end_s, rate_jobs_per_s), ...), seconds since the measured start."""
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


def _faults(value: Any) -> tuple:
    from bench.config.faults import parse_faults  # faults.py needs ConfigError from here

    return parse_faults(value)


def _flag(param: str, value: Any) -> bool:
    """``1``/``0`` (a TOML ``true``/``false`` in a workload file too) → bool; raises ConfigError."""
    if isinstance(value, bool):
        return value
    text = str(value).strip()
    if text == "1":
        return True
    if text == "0":
        return False
    raise ConfigError(param, f"{value!r} is not allowed; allowed: 1 or 0")


def _choice(param: str, value: Any, allowed: tuple[str, ...]) -> str:
    text = str(value).strip().lower()
    if text not in allowed:
        raise ConfigError(param, f"unknown value {value!r}; allowed: {', '.join(allowed)}")
    return text


def mask_dsn(dsn: str) -> str:
    """Return ``dsn`` with any password replaced by ``***`` (URL and key=value forms)."""
    masked = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", dsn)
    return re.sub(r"(password\s*=\s*)('[^']*'|\S+)", r"\1***", masked, flags=re.I)


def load_workload(name: str) -> dict[str, Any]:
    """Read ``workloads/<name>.toml`` and return its table.

    Raises :class:`ConfigError` (``WORKLOAD``) if the file is missing or not valid TOML.
    """
    if not re.match(r"^[A-Za-z0-9_-]+$", name):
        raise ConfigError("WORKLOAD", f"{name!r} is not a workload name; allowed: letters, digits, - and _")
    path = WORKLOADS_DIR / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in WORKLOADS_DIR.glob("*.toml"))
        raise ConfigError("WORKLOAD", f"no workload {name!r}; allowed: {', '.join(known)}")
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError("WORKLOAD", f"{path.name} is not valid TOML: {err}") from None


_KEYS = {
    "policy", "workers", "batch", "txn", "work_ms", "index", "layout", "history", "backlog",
    "duration", "warmup", "lease_s", "schema", "results",
    "work_dist", "work_sigma", "work_slow_ms", "slow_share", "max_attempts", "reaper_interval_s",
    "fail_prob", "poison_share", "retry_base_s", "retry_cap_s",
    "rate", "arrival", "producers", "priority_mix", "future_share", "future_delay_ms", "faults", "bursts",
    "plan_cache", "prepared", "autovacuum",
}


def build_config(workload: str = "default", overrides: Mapping[str, Any] | None = None,
                 dsn: str | None = None) -> RunConfig:
    """Merge a workload file with overrides and validate every value.

    ``overrides`` maps lower-case keys (as in the TOML file) to raw values (strings
    from the command line or typed values); None values are ignored. Returns a
    :class:`RunConfig`. Raises :class:`ConfigError` naming the first bad parameter.
    """
    raw = dict(load_workload(workload))
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise ConfigError(unknown[0].upper(), f"unknown key in workloads/{workload}.toml; allowed: {', '.join(sorted(_KEYS))}")
    for key, value in (overrides or {}).items():
        if value is not None and value != "":
            raw[key] = value

    schema = str(raw.get("schema", "qbench"))
    if not _SCHEMA_RE.match(schema):
        raise ConfigError("SCHEMA", f"{schema!r} is not allowed; use a lower-case identifier ([a-z_][a-z0-9_]*, at most 63 characters)")
    if schema in ("public", "pg_catalog", "information_schema") or schema.startswith("pg_"):
        raise ConfigError("SCHEMA", f"{schema!r} is not the tool's own schema; choose a dedicated name such as qbench")

    duration_s = parse_duration_s("DURATION", raw.get("duration", "30s"))
    if duration_s < 1:
        raise ConfigError("DURATION", f"{raw.get('duration')!r} is too short; allowed: a duration of at least 1s, e.g. 30s, 2m")
    _whole_seconds("DURATION", raw.get("duration", "30s"), duration_s)
    warmup_s = parse_duration_s("WARMUP", raw.get("warmup", "5s"))
    if warmup_s < 0:
        raise ConfigError("WARMUP", "must not be negative")
    _whole_seconds("WARMUP", raw.get("warmup", "5s"), warmup_s)

    if dsn is not None and not dsn.strip():
        dsn = None

    prepared = _flag("PREPARED", raw.get("prepared", 1))
    plan_cache = _choice("PLAN_CACHE", raw.get("plan_cache", "auto"), PLAN_CACHE_MODES)
    if not prepared and plan_cache != "auto":
        raise ConfigError("PLAN_CACHE", f"{plan_cache} has no effect with PREPARED=0: an unprepared claim is "
                                        "planned with its values on every execution; allowed: auto with PREPARED=0")

    return RunConfig(
        workload=workload,
        policy=_choice("POLICY", raw.get("policy", "skip_locked"), POLICIES),
        workers=_int("WORKERS", raw.get("workers", 10), minimum=1, maximum=MAX_WORKERS),
        batch=_int("BATCH", raw.get("batch", 1), minimum=1, maximum=10_000),
        txn=_choice("TXN", raw.get("txn", "short"), TXN_MODES),
        work_ms=_float("WORK_MS", raw.get("work_ms", 0), minimum=0.0),
        index=_choice("INDEX", raw.get("index", "partial"), INDEX_VARIANTS),
        layout=_choice("LAYOUT", raw.get("layout", "same"), LAYOUTS),
        history=_int("HISTORY", raw.get("history", 0), minimum=0, maximum=100_000_000),
        backlog=_int("BACKLOG", raw.get("backlog", 0), minimum=0, maximum=100_000_000),
        duration_s=duration_s,
        warmup_s=warmup_s,
        lease_s=_float("LEASE_S", raw.get("lease_s", 300), minimum=0.0, strict=True),
        work_dist=_choice("WORK_DIST", raw.get("work_dist", "fixed"), WORK_DISTS),
        work_sigma=_float("WORK_SIGMA", raw.get("work_sigma", 0.5), minimum=0.0),
        work_slow_ms=_float("WORK_SLOW_MS", raw.get("work_slow_ms", 0), minimum=0.0),
        slow_share=_share("SLOW_SHARE", raw.get("slow_share", 0)),
        max_attempts=_int("MAX_ATTEMPTS", raw.get("max_attempts", 5), minimum=1, maximum=1000),
        reaper_interval_s=_float("REAPER_INTERVAL_S", raw.get("reaper_interval_s", 0), minimum=0.0),
        fail_prob=_share("FAIL_PROB", raw.get("fail_prob", 0)),
        poison_share=_share("POISON_SHARE", raw.get("poison_share", 0)),
        retry_base_s=_float("RETRY_BASE_S", raw.get("retry_base_s", 0.1), minimum=0.0),
        retry_cap_s=_float("RETRY_CAP_S", raw.get("retry_cap_s", 5.0), minimum=0.0),
        rate=_float("RATE", raw.get("rate", 0), minimum=0.0),
        arrival=_choice("ARRIVAL", raw.get("arrival", "constant"), ARRIVALS),
        producers=_int("PRODUCERS", raw.get("producers", 1), minimum=1, maximum=100),
        priority_mix=_priority_mix(raw.get("priority_mix", {"0": 1.0})),
        future_share=_share("FUTURE_SHARE", raw.get("future_share", 0)),
        future_delay_ms=_float("FUTURE_DELAY_MS", raw.get("future_delay_ms", 0), minimum=0.0),
        faults=_faults(raw.get("faults")),
        bursts=_bursts(raw.get("bursts")),
        plan_cache=plan_cache,
        prepared=prepared,
        autovacuum=_choice("AUTOVACUUM", raw.get("autovacuum", "on"), AUTOVACUUM_MODES),
        schema=schema,
        results=str(raw.get("results", "results")),
        dsn=dsn,
    )
