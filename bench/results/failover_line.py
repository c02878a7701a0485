"""A ``failover`` of ``summary.json`` in one line, for the run's last lines and its report (the figures:
:mod:`bench.run_summary.failover`; recovery's rule: :mod:`bench.results.recovery`)."""

from __future__ import annotations

from bench.results.recovery import RATE_HELD_SHARE

LOSS_WORDS = {"acknowledged_claims_missing": "acknowledged claims missing",
              "acknowledged_completions_missing": "acknowledged completions missing",
              "produced_jobs_missing": "produced jobs missing", "jobs_run_twice": "jobs run twice"}


def recovery_text(r: dict | None) -> str:
    """When the queue held again (:func:`bench.results.recovery.recovery`), with what it was judged by."""
    if not r:
        return "recovery not judged"
    share = f"{RATE_HELD_SHARE * 100:g} %"
    tests = ([f"≥ {share} of {r['rate_jobs_per_s']:g} jobs/s"] if r["rate_jobs_per_s"] is not None else []) + r["judged_by"]
    by = f"{r['hold_s']} seconds in a row with {' and '.join(tests) or 'nothing to judge'}"
    unjudged = f"; not judged per second: {', '.join(r['not_judged'])}" if r["not_judged"] else ""
    if r["recovered_at_s"] is None:
        return f"not recovered within the window ({by}){unjudged}"
    return f"recovered at {r['recovered_at_s']:g} s, {r['recovery_s']:g} s after the kill ({by}){unjudged}"


def failover_line(f: dict) -> str:
    """The failover in a line: the kill, the promotion, the embedded pooler's re-point (when there was one), claims
    resuming, recovery, what was lost."""
    if f.get("error"):
        return f"failover: {f['error']}"
    promoted = (f"standby promoted at {f['promoted_at_s']:g} s (pg_promote {f['promotion_s']:g} s)"
                if f.get("promoted") else "standby not promoted")
    if f.get("repointed_at_s") is not None:
        errors = ", ".join(f"{kind} {n}" for kind, n in (f.get("errors_kill_to_repoint") or {}).items()) or "none"
        promoted += (f"; pooler re-pointed at {f['repointed_at_s']:g} s ({f['promotion_to_repoint_s']:g} s after the "
                     f"promotion, PAUSE to RESUME {f['repoint_s']:g} s; errors from the kill: {errors})")
    resumed = (f"claims resumed at {f['claims_resumed_at_s']:g} s ({f['claimless_s']} s without a claim, "
               f"reconnection ≤ {f['reconnection_s']:g} s after the promotion)"
               if f.get("claims_resumed_at_s") is not None else "claims never resumed")
    losses = f.get("losses")
    lost = ("losses not audited" if not losses else
            ", ".join(f"{losses[k]} {words}" for k, words in LOSS_WORDS.items() if losses.get(k)) or "nothing lost")
    return (f"failover: primary killed at {f['killed_at_s']:g} s ({f['processes_killed']} processes), {promoted}; "
            f"{resumed}; {recovery_text(f.get('recovery'))}; {lost}")
