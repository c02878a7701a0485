"""``summary.json`` ``failover``: what the ``failover`` window did (run.json's record) and what the workers saw, from
intervals.csv (docs/failover.md, "What is measured"). The rule is decided here, once: ``claimless_s`` counts the
measured seconds with no claim from the kill's second on until the first second with one;
``claims_resumed_at_s`` is that first second (s since measured start, the second's start: to the second);
``reconnection_s`` is from the promotion to the end of that second, an upper bound to the second; ``recovery``: when
the rate and the SLO held again after the kill (the rule: :mod:`bench.results.recovery`). A failover observed, not
caused (``caused`` false: docs/failover.md, "Observe-only"), reads the old primary's last answer as the kill and the
new one's first answer as the promotion."""

from __future__ import annotations

from bench.results.failover_line import event_times
from bench.results.recovery import recovery


def without_primary(run_info: dict, t_s: float) -> bool:
    """Whether the measured second ``t_s`` overlaps the failover's time with no primary, from the kill to the
    promotion (to the run's end when none came; an observed one's: :func:`event_times`): the monitor cannot sample
    in it, the event and not a fault of the measurement. False without a failover."""
    killed, promoted = event_times(run_info.get("failover") or {})
    return killed is not None and t_s + 1 > killed and (promoted is None or t_s <= promoted)


def failover_figures(run_info: dict, rows: list[dict], losses: dict | None = None) -> dict | None:
    """The failover's record with ``claimless_s``, ``claims_resumed_at_s``, ``reconnection_s``, ``recovery`` and ``losses`` (the
    audit across the promotion: :mod:`bench.engines.failover_losses`; None when not audited); None without a
    failover (none caused, none noticed)."""
    record = run_info.get("failover")
    if not record:
        return None
    killed, promoted = event_times(record)
    after = [r for r in rows if killed is not None and r["t_s"] + 1 > killed]
    resumed = next((r["t_s"] for r in after if r.get("claims") and (promoted is None or r["t_s"] + 1 > promoted)), None)
    claimless = sum(1 for r in after if not r.get("claims") and (resumed is None or r["t_s"] < resumed))
    config = run_info.get("config") or {}
    return {**record, "claimless_s": claimless if killed is not None else None, "claims_resumed_at_s": resumed,
            "reconnection_s": round(resumed + 1 - promoted, 3) if resumed is not None and promoted is not None else None,
            "recovery": recovery(rows, killed, rate=config.get("rate") or 0.0, slo_text=config.get("slo") or "")
            if killed is not None else None,
            "losses": losses}
