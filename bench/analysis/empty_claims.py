"""Empty claims while work waited (field case FR-07): claims that returned no row while rows were certainly pending, a
lower bound counted per second from the run's figures, None where rows come and go (the rule: docs/mariadb.md)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

__all__ = ["bound_holds", "pending_lower_bounds", "empty_while_work_waited"]


def bound_holds(config: Mapping[str, Any]) -> bool:
    """True when the run (its ``config``, as in ``run.json``) never adds or returns a pending row:
    ``rate`` 0, ``fail_prob`` and ``poison_share`` 0, ``reaper_interval_s`` 0 and no ``faults``."""
    def zero(key: str) -> bool:
        try:
            return float(config.get(key) or 0) == 0
        except (TypeError, ValueError):
            return False
    return all(zero(k) for k in ("rate", "fail_prob", "poison_share", "reaper_interval_s")) and not config.get("faults")


def pending_lower_bounds(jobs_claimed: Sequence[Any], pending_final: int) -> list[int]:
    """Per second, the fewest rows that were pending at every moment of it: ``pending_final`` plus the
    jobs claimed in the later seconds (``jobs_claimed``: one count per measured second, missing as 0)."""
    counts = [int(c) if c is not None and c == c else 0 for c in jobs_claimed]  # NaN != NaN
    bounds, later = [0] * len(counts), 0
    for i in range(len(counts) - 1, -1, -1):
        bounds[i] = pending_final + later
        later += counts[i]
    return bounds


def empty_while_work_waited(config: Mapping[str, Any], jobs_claimed: Sequence[Any], empty_claims: Sequence[Any],
                            pending_final: int | None) -> tuple[int | None, list[bool]]:
    """(empty claims in seconds whose pending bound is above 0, and per second whether it is), or
    (None, []) when :func:`bound_holds` is False or the audit counted no pending rows (it did not run)."""
    if pending_final is None or not bound_holds(config):
        return None, []
    waited = [b > 0 for b in pending_lower_bounds(jobs_claimed, int(pending_final))]
    empties = [int(e) if e is not None and e == e else 0 for e in empty_claims]
    return sum(e for e, w in zip(empties, waited) if w), waited
