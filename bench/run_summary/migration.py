"""``summary.json`` ``migrations``: each ``migration`` window's figures, from run.json's attempts and intervals.csv's
lock queue (docs/migrations.md, "The stall"). The rule is decided here, once:

- the lock queue is sampled every 100 ms (:mod:`bench.engines.postgres.lock_queue`); a **stalled sample** shows
  the migration holding or asking for a lock on the queue table in a mode that conflicts with ROW EXCLUSIVE,
  the lock a claim's UPDATE takes, while at least one worker waits for a lock on that table; it stands for the
  time since the sample before it;
- ``stall_s``: the time of the stalled samples (``stall_ms`` summed), ``longest_stall_s``: the longest run of
  consecutive stalled samples (the most ``ongoing_stall_ms`` of the window's seconds); both to the sampling's 0.1 s;
- **delayed claims** are the workers' lock waits on the table first seen in a stalled sample, each (backend,
  wait start) once: a lower bound, since a wait that begins and ends between two samples is not seen;
- ``claimless_s``: measured seconds with no claim, from the window's start to the end of its last attempt."""

from __future__ import annotations

import math


def migration_figures(record: dict, rows: list[dict]) -> dict:
    """One window's figures: ``ddl``, ``lock_timeout_ms``, ``timeout_set`` (as the server has it), ``attempts``, ``lock_timeouts``, ``succeeded``,
    ``error``, ``done_s`` (s since measured start), ``stall_s``, ``longest_stall_s``, ``delayed_claims``,
    ``claimless_s``, ``lock_queue_max`` (the most requests waiting at one sample, by mode); ``None`` where
    nothing was sampled."""
    attempts = record["attempts"]
    done = [a for a in attempts if a["outcome"] == "done"]
    errors = [a["error"] for a in attempts if a["outcome"] == "error"]
    last_end = max((a["end_s"] for a in attempts if a["end_s"] is not None), default=None)
    unfinished = any(a["end_s"] is None for a in attempts)
    until = math.inf if unfinished or last_end is None else last_end
    inside = [r for r in rows if r["t_s"] + 1 > record["start_s"] and r["t_s"] <= until]
    sampled = [r for r in inside if r.get("stall_ms") is not None]
    return {"ddl": record["ddl"], "statement": record["statement"], "lock_timeout_ms": record["lock_timeout_ms"],
            "retry_ms": record["retry_ms"], "timeout_set": record["timeout_set"], "attempts": len(attempts),
            "lock_timeouts": sum(1 for a in attempts if a["outcome"] == "lock_timeout"),
            "succeeded": bool(done), "error": errors[-1] if errors else None,
            "unfinished_at_end": unfinished,
            "done_s": done[0]["end_s"] if done else None,
            "stall_s": round(sum(r["stall_ms"] for r in sampled) / 1000, 1) if sampled else None,
            "longest_stall_s": round(max(r["ongoing_stall_ms"] or 0 for r in sampled) / 1000, 1) if sampled else None,
            "delayed_claims": sum(r.get("delayed_claims") or 0 for r in sampled) if sampled else None,
            "claimless_s": sum(1 for r in inside if not r.get("claims")),
            "lock_queue_max": _most_waiting(sampled)}


def _most_waiting(rows: list[dict]) -> int | None:
    """The most requests waiting by mode at one second's sample, summed over the modes; None where the engine
    reads no mode (MariaDB's processlist) or nothing was sampled."""
    totals = [sum(r[k] for k in modes) for r in rows
              if (modes := [k for k in r if k.startswith("lock_queue_") and k != "lock_queue_workers"
                            and r[k] is not None])]
    return max(totals, default=None)


#: Why the stall and the delayed claims are not measured behind a pooler (docs/poolers.md, "Reading the pooler
#: figures"): they count workers' lock waits, and a pooled server connection does not say whose it is.
BEHIND_POOLER = ("not measured behind a pooler: a server connection carries whichever worker used it last, so a "
                 "lock waiter on the server cannot be told to be a worker's")


def migrations(run_info: dict, rows: list[dict]) -> list[dict]:
    """:func:`migration_figures` of each window the run opened (none: an empty list); behind a pooler each with
    ``workers_not_measured`` (:data:`BEHIND_POOLER`)."""
    why = BEHIND_POOLER if run_info.get("pooler") else None
    return [{**migration_figures(record, rows), "workers_not_measured": why}
            for record in run_info.get("migrations") or []]
