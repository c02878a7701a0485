"""Service-level objectives: the ``SLO`` parameter's grammar (``key<=value,…``; keys in :data:`KEYS`), the
``summary.json`` figure each reads, and the one rule that judges them (docs/capacity-plan.md). Standard
library only, so the parameter table can read it before the virtual environment exists."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from bench.errors import ConfigError
from bench.results.model import problems
from bench.results.values import fmt_seconds, fmt_sig

#: Time units an objective may be written in, and their value in seconds.
TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
PERCENTILES = ("p50", "p95", "p99", "max")


@dataclass(frozen=True)
class Key:
    """One SLO key: ``dimension`` is ``time`` (a unit of :data:`TIME_UNITS`, kept in seconds), ``slope`` (s of
    age per s) or ``share`` (``%`` or 0..1, kept as a fraction); ``op`` the one comparison allowed;
    ``open_loop`` when the figure exists only with ``RATE``; ``meaning`` what is measured."""

    dimension: str
    op: str
    open_loop: bool
    meaning: str


def _latency_keys() -> dict[str, Key]:
    what = {"pickup": ("the job's eligible time to its claim, in database time", True),
            "claim": ("a claim's wall time, commit included", False),
            "complete": ("the completion statement's wall time", False)}
    return {f"{op}_{pct}": Key("time", "<=", open_loop, f"{pct} of {meaning}")
            for op, (meaning, open_loop) in what.items() for pct in PERCENTILES}


#: Every SLO key.
KEYS: dict[str, Key] = {
    **_latency_keys(),
    "age_max": Key("time", "<=", True, "the largest oldest eligible age sampled"),
    "age_slope": Key("slope", "<=", True, "the oldest eligible age's least-squares trend, s per s"),
    "error_rate": Key("share", "<=", False, "errors over claims, a policy's normal refusals (NOWAIT's "
                                            "lock-not-available) left out"),
    "throughput_share": Key("share", ">=", True, "jobs completed over jobs offered"),
}

_OBJECTIVE = re.compile(r"^([a-z0-9_]+)\s*(<=|>=|<|>|=)\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([a-z%/]*)$")
ALLOWED = ("a comma-separated list of key<=value, e.g. pickup_p99<=1s,claim_p99<=50ms; keys: "
           + ", ".join(KEYS) + "; time units us, ms, s; shares in % (throughput_share>=99%)")


@dataclass(frozen=True)
class Objective:
    """One parsed objective: ``threshold`` in the key's base unit (seconds, s per s, or a
    fraction); ``unit`` as written (shown back with the measured value); ``text`` canonical."""

    key: str
    op: str
    threshold: float
    unit: str
    text: str


def _parse_one(part: str) -> Objective:
    match = _OBJECTIVE.match(part.strip().lower())
    if match is None:
        raise ConfigError("SLO", f"{part.strip()!r} is not key<=value; allowed: {ALLOWED}")
    name, op, number, unit = match.groups()
    key = KEYS.get(name)
    if key is None:
        raise ConfigError("SLO", f"unknown key {name!r}; allowed keys: {', '.join(KEYS)}")
    if op != key.op:
        raise ConfigError("SLO", f"{part.strip()!r} uses {op}, but {name} is "
                                 f"{'a floor' if key.op == '>=' else 'a ceiling'}; allowed: {name}{key.op}value")
    value = float(number)
    if not math.isfinite(value):
        raise ConfigError("SLO", f"{part.strip()!r}: the threshold is not a finite number; allowed: e.g. {name}{key.op}1s")
    if key.dimension == "time":
        if unit not in TIME_UNITS:
            raise ConfigError("SLO", f"{part.strip()!r} needs a time unit; allowed: {name}<=N us, ms or s")
        threshold = value * TIME_UNITS[unit]
        if threshold <= 0:
            raise ConfigError("SLO", f"{part.strip()!r}: a time of 0 cannot be met; allowed: a time > 0")
    elif key.dimension == "slope":
        if unit not in ("", "s/s"):
            raise ConfigError("SLO", f"{part.strip()!r}: age_slope is in seconds per second, no unit; "
                                     "allowed: age_slope<=0.01")
        threshold = value
    else:
        if unit not in ("", "%"):
            raise ConfigError("SLO", f"{part.strip()!r}: a share is written in % or as a fraction; "
                                     f"allowed: {name}{key.op}1%")
        threshold = value / 100 if unit == "%" else value
        if threshold > 1:
            raise ConfigError("SLO", f"{part.strip()!r} is more than 100 %; allowed: 0% to 100%")
    return Objective(name, op, threshold, unit, f"{name}{op}{number}{unit}")


def objectives(text: str) -> tuple[Objective, ...]:
    """The objectives of an ``SLO`` value ("" gives none). Raises ConfigError (``SLO``) naming the
    first bad part: an unknown key, a wrong comparison, a missing or wrong unit, a repeated key."""
    if not str(text).strip():
        return ()
    found: dict[str, Objective] = {}
    for part in str(text).split(","):
        if not part.strip():
            raise ConfigError("SLO", f"an empty objective in {text!r}; allowed: {ALLOWED}")
        objective = _parse_one(part)
        if objective.key in found:
            raise ConfigError("SLO", f"{objective.key} is given twice; allowed: each key once")
        found[objective.key] = objective
    return tuple(found.values())


def canonical(text: Any) -> str:
    """The ``SLO`` parameter's value: ``text`` checked (:func:`objectives`) and written canonically
    (lower case, no spaces), "" for none. Raises ConfigError."""
    if not isinstance(text, str):
        raise ConfigError("SLO", f"{text!r} is not text; allowed: {ALLOWED}")
    return ",".join(o.text for o in objectives(text))


def open_loop_keys(text: str) -> list[str]:
    """The keys of ``text`` that exist only with arrivals (``RATE`` > 0)."""
    return [o.key for o in objectives(text) if KEYS[o.key].open_loop]


def claim_count(summary: Mapping[str, Any]) -> int:
    """Claims made in the measured window: ``claims``, counted (a summary written before it had the key:
    ``claims_per_s`` x ``measured_s``, within one claim)."""
    if summary.get("claims") is not None:
        return summary["claims"]
    return round((summary.get("claims_per_s") or 0) * (summary.get("measured_s") or 0))


def errors_beyond_refusals(summary: Mapping[str, Any]) -> int:
    """Errors in the measured window less a policy's normal refusals (NOWAIT's lock-not-available, counted
    as ``nowait_retries``): what ``error_rate`` and the verdict's errors count."""
    return sum((summary.get("errors") or {}).values()) - (summary.get("nowait_retries") or 0)


def measured(summary: Mapping[str, Any], key: str) -> float | None:
    """The figure ``key`` reads from a run's ``summary.json``, in the key's base unit (seconds,
    s per s, or a fraction); None when the run did not measure it."""
    def latency(field: str, pct: str, scale: float) -> float | None:
        value = (summary.get(field) or {}).get(pct)
        return None if value is None else value * scale

    name, _, pct = key.partition("_")
    if name == "pickup" and pct in PERCENTILES:
        return latency("pickup_latency_ms", pct, 1e-3)
    if name in ("claim", "complete") and pct in PERCENTILES:
        return latency(f"{name}_latency_us", pct, 1e-6)
    if key == "age_max":
        return (summary.get("oldest_eligible_age_s") or {}).get("max")
    if key == "age_slope":
        return summary.get("oldest_age_slope_s_per_s")
    if key == "error_rate":
        claims = claim_count(summary)
        return errors_beyond_refusals(summary) / claims if claims else None
    if key == "throughput_share":
        offered = summary.get("jobs_produced") or 0
        return summary["jobs_completed"] / offered if offered else None
    raise KeyError(key)


def fmt(value: float | None, objective: Objective) -> str:
    """``value`` (base unit) as text: a time in the unit that keeps it at or above 1 (``412 ms``), a share
    in % when the objective was written in % (``0.3 %``), a slope in s per s."""
    if value is None:
        return "not measured"
    if KEYS[objective.key].dimension == "time":
        return fmt_seconds(value)
    if objective.unit == "%":
        return f"{fmt_sig(value * 100)} %"
    return f"{value:+.3f} s per s" if objective.key == "age_slope" else fmt_sig(value)


def within(value: float, objective: Objective) -> bool:
    """Whether ``value`` (in the key's base unit) meets ``objective``."""
    return value <= objective.threshold if objective.op == "<=" else value >= objective.threshold


def judge(text: str, summary: Mapping[str, Any]) -> dict[str, Any] | None:
    """The run's SLO verdict, as ``summary.json`` ``slo``: ``{"spec", "status", "objectives": [{"key",
    "op", "threshold", "threshold_text", "measured", "measured_text", "status"}], "inconclusive_because"}``;
    None when ``text`` gives no objective. Thresholds and measured values are in the keys' base units."""
    parsed = objectives(text)
    if not parsed:
        return None
    untrusted = problems(summary)
    rows = []
    for o in parsed:
        value = measured(summary, o.key)
        if untrusted or value is None:
            status = "inconclusive"
        else:
            status = "pass" if within(value, o) else "fail"
        rows.append({"key": o.key, "op": o.op, "threshold": o.threshold, "threshold_text": o.text,
                     "measured": value, "measured_text": fmt(value, o), "status": status})
    statuses = {r["status"] for r in rows}
    overall = "pass" if statuses == {"pass"} else "fail" if "fail" in statuses else "inconclusive"
    because = untrusted + [f"{r['key']} was not measured" for r in rows if r["measured"] is None]
    return {"spec": text, "status": overall, "objectives": rows, "inconclusive_because": because}


def phrase(objective: Mapping[str, Any]) -> str:
    """One judged objective (a row of :func:`judge`) as text: ``claim_p99<=50ms measured 1.67 ms`` or
    ``age_slope<=0.05: not measured``."""
    if objective["measured"] is None:
        return f"{objective['threshold_text']}: not measured"
    return f"{objective['threshold_text']} measured {objective['measured_text']}"


def worst_ratio(slo: Mapping[str, Any] | None) -> float | None:
    """How far the worst objective of a verdict (:func:`judge`) is from its threshold (measured over threshold
    for a ceiling, threshold over measured for a floor: above 1 missed); None when one was not measured."""
    if not slo:
        return None
    ratios = []
    for r in slo["objectives"]:
        if r["measured"] is None:
            return None
        if r["op"] == "<=":
            ratios.append(r["measured"] / r["threshold"] if r["threshold"] else float("inf"))
        else:
            ratios.append(r["threshold"] / r["measured"] if r["measured"] else float("inf"))
    return max(ratios)
