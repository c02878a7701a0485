"""The audit across a promotion (``FAULTS=failover``, docs/failover.md "The audit across the promotion"): what the
claim log says was acknowledged before the promotion and the new primary does not have, counted under names of
its own, and how much of each broken invariant that explains. Engine-neutral: the rows' states come from the
engine. The rule is decided here, once:

- **acknowledged** is what the claim log holds before ``position`` (its length as the promotion began: no commit
  can return between the kill and the promotion, so every event before it was acknowledged by the old primary);
- a job's acknowledged **claims missing**: its claims in the log beyond the attempts the new primary counts
  (``claims - attempts``), at most its claims before the promotion (those after it committed on the new primary);
- an acknowledged **completion missing**: a completion before the promotion whose job is not done on the new
  primary with that attempt token;
- a **produced job missing**: a job whose insert was acknowledged before the promotion and that has no row, or
  whose id was produced again after it (the new primary's sequence was behind: another job took the id, and
  every event of the first before the promotion is of a job the new primary never had);
- **jobs run twice**: jobs with a claim or completion missing that were claimed again after the promotion;
- with ``EFFECTS``, from the client's side (the effects table lost rows with the old primary, so it cannot say):
  an **acknowledged effect write** is an ``e`` event (``outside``, ``idempotent``: the statement returned having
  written its row) or, under ``same_txn``, an applied completion (``a``: the effect row is in its statement);
  **effects missing**: writes acknowledged before the promotion that the new primary's effects table lacks;
  **effects written twice**: jobs with more than one acknowledged write over the run (a job whose id was produced
  again counts as two jobs).

What they explain, per invariant (each never more than the audit counted): ``double_claims`` the claims missing;
``double_completions`` the jobs with a completion missing that were completed again; ``stale_completions_applied``
the missing completions whose job now carries another token; ``lost_jobs`` the jobs produced or completed before
the promotion that are missing or not done. The rest of an invariant is not explained and still breaks the run."""

from __future__ import annotations

from collections import Counter

from bench.engines.audit_flow import per_1000
from typing import Iterable

#: The keys of the figures (``summary.json`` ``failover.losses``).
LOSS_KEYS = ("acknowledged_claims_missing", "acknowledged_completions_missing", "produced_jobs_missing",
             "jobs_run_twice")
#: The keys of the effects' figures (with ``EFFECTS``; None without).
EFFECT_LOSS_KEYS = ("acknowledged_effects_missing", "effects_written_twice")
#: The claim log's kind whose events are the acknowledged effect writes, by ``EFFECTS`` mode.
EFFECT_KIND = {"outside": "e", "idempotent": "e", "same_txn": "a"}


def job_ids(events: Iterable[tuple]) -> set[int]:
    """The ids of the jobs the log names (the rows the engine reads)."""
    return {event[1] for event in events}


def reused_ids(events: list[tuple], position: int) -> set[int]:
    """Ids produced before the promotion and again after it (the new primary's sequence was behind): two jobs."""
    return ({e[1] for e in events[:position] if e[0] == "p"}
            & {e[1] for e in events[position:] if e[0] == "p"})


def effect_losses(events: list[tuple], position: int, mode: str, rows: set[tuple[int, int]]) -> dict:
    """``{EFFECT_LOSS_KEYS...}`` under ``EFFECTS`` ``mode`` from the claim log's ``events``, the log's length at
    the promotion ``position`` and the new primary's effect ``rows`` ``(logical id, attempt token)``."""
    kind = EFFECT_KIND[mode]
    reused = reused_ids(events, position)
    writes = Counter((e[1], i >= position and e[1] in reused) for i, e in enumerate(events) if e[0] == kind)
    missing = sum(1 for e in events[:position] if e[0] == kind and (e[1] in reused or (e[1], e[2]) not in rows))
    return {"acknowledged_effects_missing": missing, "effects_written_twice": sum(1 for n in writes.values() if n > 1)}


def failover_losses(events: list[tuple], position: int, states: dict[int, tuple]) -> dict:
    """``{"position", LOSS_KEYS..., "explained": {invariant: count}}`` from the claim log's ``events`` (``(kind,
    id, token, claimed_at, lease_until)``), the log's length at the promotion ``position``, and the new primary's
    ``states`` (id -> ``(attempt token, attempts, done)``; a job without a row is absent)."""
    before, after = events[:position], events[position:]
    claims_before = Counter(e[1] for e in before if e[0] == "c")
    claims_after = Counter(e[1] for e in after if e[0] == "c")
    completed_before = {(e[1], e[2]) for e in before if e[0] == "a"}
    completions_after = Counter(e[1] for e in after if e[0] == "a")
    produced_before = {e[1] for e in before if e[0] == "p"}
    # an id produced again after the promotion: the new primary's sequence was behind, so the job acknowledged
    # before it is gone and another took its id (its attempt tokens may repeat too)
    reused = reused_ids(events, position)
    claims_missing = {}
    for job, n_before in claims_before.items():
        attempts = states[job][1] if job in states and states[job][1] is not None else 0
        missing = n_before if job in reused else min(n_before, n_before + claims_after[job] - attempts)
        if missing > 0:
            claims_missing[job] = missing
    completions_missing = {(job, token) for job, token in completed_before
                           if job in reused or job not in states or states[job][0] != token or not states[job][2]}
    produced_missing = {job for job in produced_before if job not in states or job in reused}
    lost_jobs = ({job for job, _ in completions_missing if job not in states or not states[job][2]}
                 | {job for job in produced_before if job not in states})
    rerun = {job for job in set(claims_missing) | {j for j, _ in completions_missing}
             if claims_after[job] and job not in reused}
    return {"position": position,
            "acknowledged_claims_missing": sum(claims_missing.values()),
            "acknowledged_completions_missing": len(completions_missing),
            "produced_jobs_missing": len(produced_missing),
            "jobs_run_twice": len(rerun),
            "explained": {
                "double_claims": sum(claims_missing.values()),
                "double_completions": len({job for job, _ in completions_missing if completions_after[job]}),
                "stale_completions_applied": sum(1 for job, token in completions_missing
                                                 if job in states and states[job][0] != token),
                "lost_jobs": len(lost_jobs)}}


def reused_redeliveries(events: list[tuple], position: int) -> int:
    """The audit's redeliveries (claims beyond a job's first, by id) that are not: ids claimed before the promotion
    and claimed again after it was produced again, two jobs under one id (one each)."""
    reused = reused_ids(events, position)
    claimed_before = {e[1] for e in events[:position] if e[0] == "c" and e[1] in reused}
    return len(claimed_before & {e[1] for e in events[position:] if e[0] == "c"})


def recount_redeliveries(audit: dict, reused: int) -> dict:
    """``audit`` with its redeliveries (and its effects' per 1,000) less ``reused`` (:func:`reused_redeliveries`)."""
    if not reused or audit.get("redeliveries") is None:
        return audit
    out = {**audit, "redeliveries": max(0, audit["redeliveries"] - reused)}
    if out.get("effects"):
        effects = out["effects"] = {**out["effects"], "redeliveries": out["redeliveries"]}
        effects["duplicates_per_1000_redeliveries"] = per_1000(effects["duplicate_jobs"], out["redeliveries"])
    return out


def explain(invariants: dict, losses: dict) -> dict:
    """``invariants`` less what ``losses`` explains (each at least 0); ``losses["explained"]`` is set to what was
    taken off each."""
    left, taken = dict(invariants), {}
    for name, count in losses["explained"].items():
        if left.get(name) is None:
            continue
        taken[name] = min(left[name], count)
        left[name] -= taken[name]
    losses["explained"] = taken
    return left
