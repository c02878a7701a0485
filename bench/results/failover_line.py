"""A ``failover`` of ``summary.json`` in one line, for the run's last lines and its report (the figures:
:mod:`bench.run_summary.failover`; recovery's rule: :mod:`bench.results.recovery`)."""

from __future__ import annotations

from bench.results.recovery import RATE_HELD_SHARE

LOSS_WORDS = {"acknowledged_claims_missing": "acknowledged claims missing",
              "acknowledged_completions_missing": "acknowledged completions missing",
              "produced_jobs_missing": "produced jobs missing", "jobs_run_twice": "jobs run twice"}
EFFECT_WORDS = {"acknowledged_effects_missing": "acknowledged effect rows missing",
                "effects_written_twice": "jobs whose effect was written twice (client log)"}


def loss_counts(losses: dict) -> dict[str, int]:
    """The losses that are not 0, by words (the effects' too, with ``EFFECTS``)."""
    found = {words: losses[k] for k, words in LOSS_WORDS.items() if losses.get(k)}
    effects = losses.get("effects") or {}
    return {**found, **{words: effects[k] for k, words in EFFECT_WORDS.items() if effects.get(k)}}


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
    """The failover in a line: the kill, the promotion, claims resuming, recovery, what was lost."""
    if f.get("error"):
        return f"failover: {f['error']}"
    promoted = (f"standby promoted at {f['promoted_at_s']:g} s (pg_promote {f['promotion_s']:g} s)"
                if f.get("promoted") else "standby not promoted")
    resumed = (f"claims resumed at {f['claims_resumed_at_s']:g} s ({f['claimless_s']} s without a claim, "
               f"reconnection ≤ {f['reconnection_s']:g} s after the promotion)"
               if f.get("claims_resumed_at_s") is not None else "claims never resumed")
    losses = f.get("losses")
    lost = ("losses not audited" if not losses else
            ", ".join(f"{n} {words}" for words, n in loss_counts(losses).items()) or "nothing lost")
    return (f"failover: primary killed at {f['killed_at_s']:g} s ({f['processes_killed']} processes), {promoted}; "
            f"{resumed}; {recovery_text(f.get('recovery'))}; {lost}")
