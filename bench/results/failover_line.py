"""A ``failover`` of ``summary.json`` in one line, for the run's last lines and its report (the figures:
:mod:`bench.run_summary.failover`; recovery's rule: :mod:`bench.results.recovery`)."""

from __future__ import annotations

from bench.results.recovery import RATE_HELD_SHARE

LOSS_WORDS = {"acknowledged_claims_missing": "acknowledged claims missing",
              "acknowledged_completions_missing": "acknowledged completions missing",
              "produced_jobs_missing": "produced jobs missing", "jobs_run_twice": "jobs run twice"}
#: The commit modes that acknowledge a commit the standby may not have (PostgreSQL's synchronous_commit).
ASYNC_MODES = ("off", "local")
EFFECT_WORDS = {"acknowledged_effects_missing": "acknowledged effect rows missing",
                "effects_written_twice": "jobs whose effect was written twice (client log)"}


def loss_counts(losses: dict) -> dict[str, int]:
    """The losses that are not 0, by words (the effects' too, with ``EFFECTS``)."""
    found = {words: losses[k] for k, words in LOSS_WORDS.items() if losses.get(k)}
    effects = losses.get("effects") or {}
    return {**found, **{words: effects[k] for k, words in EFFECT_WORDS.items() if effects.get(k)}}


def event_times(record: dict) -> tuple[float | None, float | None]:
    """The failover's (kill, promotion) in s since the measured start: a caused one's; an observed one's (``caused``
    false) the old primary's last answer and the new one's first (a record without ``caused`` was caused)."""
    if record.get("caused", True):
        return record.get("killed_at_s"), record.get("promoted_at_s")
    return record.get("old_primary_last_answered_s"), record.get("new_primary_first_answered_s")


def recovery_text(r: dict | None, since: str = "the kill") -> str:
    """When the queue held again (:func:`bench.results.recovery.recovery`), with what it was judged by."""
    if not r:
        return "recovery not judged"
    share = f"{RATE_HELD_SHARE * 100:g} %"
    tests = ([f"≥ {share} of {r['rate_jobs_per_s']:g} jobs/s"] if r["rate_jobs_per_s"] is not None else []) + r["judged_by"]
    by = f"{r['hold_s']} seconds in a row with {' and '.join(tests) or 'nothing to judge'}"
    unjudged = f"; not judged per second: {', '.join(r['not_judged'])}" if r["not_judged"] else ""
    if r["recovered_at_s"] is None:
        return f"not recovered within the window ({by}){unjudged}"
    return f"recovered at {r['recovered_at_s']:g} s, {r['recovery_s']:g} s after {since} ({by}){unjudged}"


def failover_line(f: dict) -> str:
    """The failover in a line: the kill, the promotion, the embedded pooler's re-point (when there was one), claims
    resuming, recovery, what was lost."""
    if f.get("error"):
        return f"failover: {f['error']}"
    if f.get("caused") is False:
        return observed_line(f)
    promoted = (f"standby promoted at {f['promoted_at_s']:g} s (pg_promote {f['promotion_s']:g} s)"
                if f.get("promoted") else "standby not promoted")
    if f.get("repointed_at_s") is not None:
        errors = ", ".join(f"{kind} {n}" for kind, n in (f.get("errors_kill_to_repoint") or {}).items()) or "none"
        promoted += (f"; pooler re-pointed at {f['repointed_at_s']:g} s ({f['promotion_to_repoint_s']:g} s after the "
                     f"promotion, PAUSE to RESUME {f['repoint_s']:g} s; errors from the kill: {errors})")
    mode = f" at synchronous_commit={f['synchronous_commit']}" if f.get("synchronous_commit") else ""
    return (f"failover{mode}: primary killed at {f['killed_at_s']:g} s ({f['processes_killed']} processes), {promoted}; "
            f"{_resumed(f, 'the promotion')}; {recovery_text(f.get('recovery'))}; {_lost(f)}")


def observed_line(f: dict) -> str:
    """A failover the tool noticed and did not cause (``caused`` false): the change of primary, the gap, claims
    resuming, recovery, what was lost."""
    before, after = f["before"], f["after"]
    last = f["old_primary_last_answered_s"]
    gap = (f"the old last answered at {last:g} s, the new first at {f['new_primary_first_answered_s']:g} s "
           f"(gap {f['gap_s']:g} s)" if last is not None else "the old never answered in the run")
    return (f"failover: observed, not caused: the primary changed (timeline {before['timeline']} → {after['timeline']}"
            f"{'' if after['system_identifier'] == before['system_identifier'] else ', another system'}), noticed at "
            f"{f['noticed_at_s']:g} s, {gap}; {_resumed(f, '')}; "
            f"{recovery_text(f.get('recovery'), 'the old primary last answered')}; {_lost(f)}")


def _resumed(f: dict, since: str) -> str:
    """Claims resuming after the failover (the seconds without a claim counted from the WAL receiver's stop when
    there was one: a synchronous mode stalls from there)."""
    if f.get("claims_resumed_at_s") is None:
        return "claims never resumed"
    stop = (f" from the WAL receiver's stop at {f['wal_receiver_stopped_at_s']:g} s"
            if f.get("wal_receiver_stopped_at_s") is not None else "")
    reconnected = (f", reconnection ≤ {f['reconnection_s']:g} s after {since}" if f.get("reconnection_s") is not None
                   else "")
    return f"claims resumed at {f['claims_resumed_at_s']:g} s ({f['claimless_s']} s without a claim{stop}{reconnected})"


def _lost(f: dict) -> str:
    """The acknowledged work the new primary lacks, in words; with losses at an asynchronous mode, what a
    synchronous one does instead (PostgreSQL's synchronous_commit)."""
    losses = f.get("losses")
    if not losses:
        return "losses not audited"
    lost = ", ".join(f"{n} {words}" for words, n in loss_counts(losses).items())
    if lost and f.get("synchronous_commit") in ASYNC_MODES:
        lost += (f" (acknowledged at {f['synchronous_commit']} before the standby had it: remote_write, on and "
                 "remote_apply with a synchronous standby wait for it instead)")
    return lost or "nothing lost"
