"""When a queue has recovered after an event (a failover, an outage's backlog): the rule, decided once here and read
by every figure that says "recovered" (docs/failover.md, "Recovery: the rule").

A measured second *holds* when it completed at least :data:`RATE_HELD_SHARE` of the rate the queue is asked to keep
(``RATE`` open loop; closed loop, the mean of the measured seconds before the event) and, for each objective of the
SLO that intervals.csv has per second, its figure for that second is within it: ``pickup_p99`` (``pickup_p99_ms``),
``claim_p99`` (``claim_p99_us``), ``complete_p99`` (``complete_p99_us``), ``age_max``
(``oldest_eligible_age_s``). The queue has recovered by the end of the
first second, from the event's on, that begins :data:`HOLD_S` consecutive seconds that hold (an upper bound, to
the second); a second without the figure (no job
claimed, no monitor sample) does not hold.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from bench.results import slo as slo_rules

#: Consecutive seconds that must hold: one second's luck (a burst of completions as the backlog drains, a sample
#: between two stalls) is not recovery; five fit a short run and are well under the 10-120 s a failover's detection
#: takes (docs/failover.md).
HOLD_S = 5

#: Of the rate asked for, the share a second must complete: the same 95 % below which the producers are judged not
#: to have offered ``RATE`` (``harness_limited``, bench/results/model.py).
RATE_HELD_SHARE = 0.95

#: The SLO keys judged per second, each with its intervals.csv column and that column's unit in seconds.
PER_SECOND = {"pickup_p99": ("pickup_p99_ms", 1e-3), "claim_p99": ("claim_p99_us", 1e-6),
              "complete_p99": ("complete_p99_us", 1e-6), "age_max": ("oldest_eligible_age_s", 1.0)}


def asked_rate(rows: Sequence[Mapping[str, Any]], event_s: float, rate: float) -> float | None:
    """The jobs/s a second must approach: ``rate`` when given (open loop), else the mean completions of the measured
    seconds that ended by ``event_s``; None when there is neither."""
    if rate > 0:
        return rate
    before = [r["jobs_completed"] for r in rows if r["t_s"] + 1 <= event_s]
    return sum(before) / len(before) if before else None


def judged_by(slo_text: str) -> list[str]:
    """The SLO's objectives judged per second (their keys), in the SLO's order; the others are not."""
    return [o.key for o in slo_rules.objectives(slo_text) if o.key in PER_SECOND] if slo_text else []


def holds(row: Mapping[str, Any], rate: float | None, slo_text: str) -> bool:
    """Whether one measured second holds (the module's rule)."""
    return _holds(row, rate, slo_rules.objectives(slo_text) if slo_text else ())


def _holds(row: Mapping[str, Any], rate: float | None, objectives: Sequence[slo_rules.Objective]) -> bool:
    if rate is not None and (row.get("jobs_completed") or 0) < RATE_HELD_SHARE * rate:
        return False
    for objective in objectives:
        if objective.key not in PER_SECOND:
            continue
        column, unit_s = PER_SECOND[objective.key]
        value = row.get(column)
        if value is None or not slo_rules.within(value * unit_s, objective):
            return False
    return True


def recovery(rows: Sequence[Mapping[str, Any]], event_s: float, *, rate: float, slo_text: str) -> dict:
    """When the queue recovered after ``event_s`` (s since the measured start): ``{"recovered_at_s"`` (the end of
    the first held second, the event's second on: an upper bound, to the second; None when it never recovered
    within the window), ``"recovery_s"`` (from the event to it),
    ``"hold_s"``, ``"rate_jobs_per_s"`` (what a second had to approach, None: nothing to compare), ``"judged_by"``
    (the SLO keys judged per second), ``"not_judged"`` (the SLO keys intervals.csv has no per-second figure of)}."""
    asked, objectives = asked_rate(rows, event_s, rate), slo_rules.objectives(slo_text) if slo_text else ()
    after = [r for r in rows if r["t_s"] + 1 > event_s]  # the event's second on
    held = [_holds(r, asked, objectives) for r in after]
    start = next((i for i in range(len(after) - HOLD_S + 1) if all(held[i:i + HOLD_S])), None)
    at = after[start]["t_s"] + 1 if start is not None else None  # the end of the first held second
    keys = [o.key for o in objectives]
    return {"recovered_at_s": at, "recovery_s": round(at - event_s, 3) if at is not None else None,
            "hold_s": HOLD_S,
            "rate_jobs_per_s": round(asked, 1) if asked is not None else None, "judged_by": judged_by(slo_text),
            "not_judged": [k for k in keys if k not in PER_SECOND]}
