"""``summary.json`` ``partitions``: each ``partition`` window's figures, from run.json's record of what the workers
saw (docs/network.md, "Partitions and keepalives"). Decided here, once: a worker **noticed** the partition at its
first error after the cut (a lost connection, a statement or a connect that timed out), timed from just before
the relay was asked to cut; it **gave up in time** when that was within ``TCP_USER_TIMEOUT_MS`` +
:data:`NOTICE_SLACK_S` (the keepalive's interval can add up to a third of it, and a back-off or a running job
can delay the first error that shows it)."""

from __future__ import annotations

#: Seconds beyond ``TCP_USER_TIMEOUT_MS`` a worker may take to notice and still count as in time.
NOTICE_SLACK_S = 2.0


def _p50_max(values: list[float]) -> dict:
    values = sorted(values)
    return {"p50": values[(len(values) - 1) // 2] if values else None, "max": values[-1] if values else None}


def partition_figures(record: dict, tcp_user_timeout_ms: int, invariants: dict) -> dict:
    """One window's figures: ``start_s``, ``end_s``, ``workers``, ``noticed`` (workers that saw an error),
    ``noticed_s`` {p50, max} (s after the cut), ``late`` (workers that noticed after the bound, or never:
    names), ``bound_s`` (``TCP_USER_TIMEOUT_MS`` + :data:`NOTICE_SLACK_S`; None without one), ``errors`` {kind:
    count}, ``reconnections``, ``reconnected_after_heal_s`` {p50, max}, ``lease_expiries`` (jobs the reaper took
    back from the cut to the run's end), ``audit_clean`` (every invariant 0 at the audit, after the heal)."""
    noticed = record["noticed"]
    bound_s = tcp_user_timeout_ms / 1000 + NOTICE_SLACK_S if tcp_user_timeout_ms else None
    late = sorted(w for w in record["workers"]
                  if w not in noticed or (bound_s is not None and noticed[w]["after_s"] > bound_s))
    back = record["reconnected_after_heal_s"]
    return {"start_s": record["start_s"], "end_s": record["end_s"], "workers": len(record["workers"]),
            "connections_cut": record["connections_cut"], "noticed": len(noticed),
            "noticed_s": _p50_max([n["after_s"] for n in noticed.values()]),
            "noticed_by_worker": {w: n["after_s"] for w, n in sorted(noticed.items())},
            "bound_s": bound_s, "late": late if bound_s is not None else None,
            "errors": record["errors"], "reconnections": len(back),
            "reconnected_after_heal_s": _p50_max(list(back.values())),
            "lease_expiries": record["lease_expiries_since_cut"],
            "audit_clean": all(v == 0 for v in invariants.values())}


def partitions(run_info: dict, invariants: dict) -> list[dict]:
    """:func:`partition_figures` of each window the run opened (none: an empty list)."""
    timeout_ms = (run_info.get("tcp_liveness") or {}).get("tcp_user_timeout_ms") or 0
    return [partition_figures(record, timeout_ms, invariants) for record in run_info.get("partitions") or []]

