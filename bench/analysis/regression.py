"""The regression gate's rule (``qbench compare A B --max-regression 10%``): B regresses on a metric when
it is worse than A by more than the limit *and* significantly by compare's own test (Welch's t-test,
p < 0.05, on per-second samples for runs and on repetitions for sweeps). Both, so neither noise that
happens to be large nor a tiny change that happens to be significant fails a pipeline. pgqueuer's CI
gates its benchmark the same way against the median of its last runs (its docs/comparisons/benchmarks.md).
"""

from __future__ import annotations

import math

from bench.errors import ConfigError

#: The metrics a gate may name, and the default it checks.
GATE_METRICS = ("throughput", "claim_p50", "claim_p95", "claim_p99", "age_max")
DEFAULT_GATE_METRICS = ("throughput", "claim_p99")


def parse_limit(text: str) -> float:
    """``--max-regression``: ``10%`` or ``0.1`` as a fraction in (0, 10]. Raises ConfigError (MAX_REGRESSION)."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= 10:
        raise ConfigError("MAX_REGRESSION", f"{text!r} is not allowed; allowed: a share above 0, e.g. 10% or 0.1")
    return value


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
