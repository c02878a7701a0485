"""The regression gate's rule (``qbench compare A B --max-regression 10%``; docs/capacity-plan.md): worse than the
limit *and* significant by Welch's t-test (p < 0.05), as pgqueuer's CI does (its docs/comparisons/benchmarks.md)."""

from __future__ import annotations

import math

from bench.errors import ConfigError

#: The metrics a gate may name, and the default it checks.
GATE_METRICS = ("throughput", "claim_p50", "claim_p95", "claim_p99", "age_max")
DEFAULT_GATE_METRICS = ("throughput", "claim_p99")


def parse_limit(text: str) -> float:
    """``--max-regression``: ``10%`` (0 to 1,000 %) or a fraction ``0.1`` (0 to 1), as a fraction; a bare
    number above 1 is refused (``10`` would be 1,000 %). Raises ConfigError (MAX_REGRESSION)."""
    raw = str(text).strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1]) / 100 if percent else float(raw)
    except ValueError:
        value = math.nan
    allowed = "a share above 0, up to 1000% or 1, e.g. 10% or 0.1"
    if value != value:
        raise ConfigError("MAX_REGRESSION", f"{text!r} is not a share; allowed: {allowed}")
    if not 0 < value <= (10 if percent else 1):
        hint = f" ({raw} without % would be {value:.0%})" if not percent and value > 1 else ""
        raise ConfigError("MAX_REGRESSION", f"{text!r} is out of range{hint}; allowed: {allowed}")
    return value


def limit_text(limit: float) -> str:
    """The limit as the user wrote it, in %: 0.105 -> '10.5%'."""
    return f"{limit * 100:g}%"


def parse_metrics(text: str | None) -> tuple[str, ...]:
    """``--gate-metrics``: a comma list of :data:`GATE_METRICS` (default :data:`DEFAULT_GATE_METRICS`)."""
    if text is None:
        return DEFAULT_GATE_METRICS
    names = tuple(n.strip() for n in str(text).split(","))
    unknown = [n for n in names if n not in GATE_METRICS]
    if unknown or not names:
        raise ConfigError("GATE_METRICS", f"{', '.join(unknown) or text!r} is not a metric; allowed: a comma list of "
                                          + ", ".join(GATE_METRICS))
    return names


def regresses(rel_diff: float, significant: bool | None, higher_is_better: bool, limit: float) -> bool:
    """True when the relative difference (B − A) / A is worse than ``limit`` in the metric's bad direction
    and the difference is significant (``significant`` None: untested, never a regression)."""
    if rel_diff is None or math.isnan(rel_diff) or significant is not True:
        return False
    worse = -rel_diff if higher_is_better else rel_diff
    return worse > limit
