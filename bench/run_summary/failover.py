"""``summary.json`` ``failover``: what the ``failover`` window did (run.json's record) and what the workers saw, from
intervals.csv (docs/failover.md, "What is measured"). The rule is decided here, once: ``claimless_s`` counts the
measured seconds with no claim from the WAL receiver's stop's second (a synchronous mode stalls there; else the
kill's) on until claims resume; ``claims_resumed_at_s`` is the first second with a claim after the promotion began
(s since measured start, the second's start: to the second); ``reconnection_s`` is from the promotion to the end of
that second, an upper bound to the second (none for an observed failover, whose promotion time is not known); ``recovery``: when
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


def _resumed_at(rows: list[dict], record: dict) -> int | None:
    """The first second with a claim after the failover: a caused one's, after the promotion's second began; an
    observed one's (the promotion somewhere in the gap), after the first second without a claim from the old
    primary's last answer on (the kill's second when none lacked one)."""
    killed, promoted = event_times(record)
    after = [r for r in rows if r["t_s"] + 1 > killed]
    if record.get("caused", True):
        return next((r["t_s"] for r in after if r.get("claims") and (promoted is None or r["t_s"] + 1 > promoted)), None)
    idle = next((r["t_s"] for r in after if not r.get("claims")), None)
    return next((r["t_s"] for r in after if r.get("claims") and (idle is None or r["t_s"] > idle)), None)


def failover_figures(run_info: dict, rows: list[dict], losses: dict | None = None) -> dict | None:
    """The failover's record with ``claimless_s``, ``claims_resumed_at_s``, ``reconnection_s``, ``recovery`` and ``losses`` (the
    audit across the promotion: :mod:`bench.engines.failover_losses`; None when not audited); None without a
    failover (none caused, none noticed)."""
    record = run_info.get("failover")
    if not record:
        return None
    killed, promoted = event_times(record)
    config = run_info.get("config") or {}
    if killed is None:
        return {**record, "claimless_s": None, "claims_resumed_at_s": None, "reconnection_s": None, "recovery": None,
                "losses": losses}
    # a synchronous mode stops claiming when the WAL receiver stops, before the kill: counted from there
    stalled = record.get("wal_receiver_stopped_at_s") if record.get("wal_receiver_stopped_at_s") is not None else killed
    resumed = _resumed_at(rows, record)
    claimless = sum(1 for r in rows if r["t_s"] + 1 > stalled and not r.get("claims")
                    and (resumed is None or r["t_s"] < resumed))
    caused = record.get("caused", True)  # observed: the promotion's time is not known, so no reconnection figure
    return {**record, "synchronous_commit": (run_info.get("commit_mode") or {}).get("synchronous_commit"),
            "claimless_s": claimless, "claims_resumed_at_s": resumed,
            "reconnection_s": (round(resumed + 1 - promoted, 3)
                               if caused and resumed is not None and promoted is not None else None),
            "recovery": recovery(rows, killed, rate=config.get("rate") or 0.0, slo_text=config.get("slo") or ""),
            "losses": losses}
