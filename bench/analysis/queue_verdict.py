"""Does the queue keep up? The run-level verdict of an open-loop run, from its result rows."""

from __future__ import annotations

from collections import Counter

#: The run-level "does the queue keep up?" rule (see :func:`_saturation`): slopes of the oldest
#: eligible age in s per s, the age in s, and the share of arrivals completed.
SATURATION_FAST_SLOPE = 0.25
SATURATION_SLOW_SLOPE = 0.05
SATURATION_AGE_S = 2.0
SATURATION_COMPLETED_SHARE = 0.95


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``[(t, y)]`` (0 with fewer than 2 distinct t)."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_a = sum(a for _, a in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (a - mean_a) for t, a in points) / var_t if var_t else 0.0


def saturation(rate: float, rows: list[dict], counters: Counter, measured_s: float) -> dict:
    """With open-loop producers offering ``rate`` jobs/s: does the queue keep up? Least-squares fits of the
    oldest eligible age against time, over the whole window and its second half, against the ``SATURATION_*``
    limits (the rule: docs/reading-the-report.md); not assessed without producers."""
    if rate <= 0:
        return {"saturated": None, "oldest_age_slope_s_per_s": None, "oldest_age_late_slope_s_per_s": None,
                "saturation_verdict": None}
    points = [(r["t_s"], r["oldest_eligible_age_s"]) for r in rows if r.get("oldest_eligible_age_s") is not None]
    if len(points) < 3:
        return {"saturated": None, "oldest_age_slope_s_per_s": None, "oldest_age_late_slope_s_per_s": None,
                "saturation_verdict": "not assessed: fewer than 3 oldest-age samples"}
    slope = _slope(points)
    late = _slope(points[len(points) // 2:])
    completed_s = counters["jobs_completed"] / measured_s if measured_s else 0.0
    arrived_s = counters["jobs_produced"] / measured_s if measured_s else 0.0
    final_age = points[-1][1]
    falling_behind_late = late > SATURATION_SLOW_SLOPE and final_age > SATURATION_AGE_S
    saturated = ((slope > SATURATION_FAST_SLOPE and final_age > SATURATION_AGE_S)
                 or (slope > SATURATION_SLOW_SLOPE and completed_s < SATURATION_COMPLETED_SHARE * arrived_s)
                 or falling_behind_late)
    verdict = (f"saturated: {arrived_s:,.1f} jobs/s arrived (RATE {rate:g}), the workers completed "
               f"{completed_s:,.1f} jobs/s, and the oldest eligible age grows {slope:.2f} s every second"
               + (f" ({late:.2f} over the second half of the window, {final_age:.1f} s in the last sample)"
                  if falling_behind_late else "")
               if saturated else
               f"keeping up: {arrived_s:,.1f} jobs/s arrived (RATE {rate:g}), {completed_s:,.1f} jobs/s "
               f"completed, oldest eligible age trend {slope:+.3f} s per second")
    return {"saturated": saturated, "oldest_age_slope_s_per_s": round(slope, 3),
            "oldest_age_late_slope_s_per_s": round(late, 3), "saturation_verdict": verdict}
