"""Fairness across queues (tenants): Jain's index J = (Σ x_i)² / (n · Σ x_i²) of per-queue throughput (R.
Jain, D. Chiu, W. Hawe, "A Quantitative Measure of Fairness and Discrimination for Resource Allocation in
Shared Computer Systems", DEC-TR-301, Digital Equipment Corporation, 1984), the per-queue figures of
``summary.json``, and the flooding tenant's oldest eligible age against the others'."""

from __future__ import annotations

#: Above this many queues ``jobs_completed_per_queue`` is compact: count, min, max, total.
PER_QUEUE_IN_FULL_MAX = 100


def jain_index(values: list[float]) -> float | None:
    """Jain's index of ``values`` (each >= 0): in [1/n, 1]; None when empty or all zero."""
    total = sum(values)
    squares = sum(v * v for v in values)
    if not values or squares == 0:
        return None
    return total * total / (len(values) * squares)


def per_queue_figures(completed: dict[str, int] | None) -> dict:
    """``summary.json``'s ``jobs_completed_per_queue`` and ``fairness_jain`` (4 decimals) from ``{queue: jobs
    completed in the measured window}`` (None: one queue, or nothing read); the per-queue figure is the dict
    itself up to :data:`PER_QUEUE_IN_FULL_MAX` queues, else ``{"queues", "min", "max", "total"}``."""
    if not completed:
        return {"jobs_completed_per_queue": None, "fairness_jain": None}
    values = list(completed.values())
    compact = {"queues": len(values), "min": min(values), "max": max(values), "total": sum(values)}
    jain = jain_index(values)
    return {"jobs_completed_per_queue": dict(completed) if len(values) <= PER_QUEUE_IN_FULL_MAX else compact,
            "fairness_jain": None if jain is None else round(jain, 4)}


def _series(values: list[float], final: float | None) -> dict:
    return {"max": max(values) if values else None,
            "mean": round(sum(values) / len(values), 6) if values else None,
            "final": final}


def tenant_ages(rows: list[dict], tenants: int) -> dict | None:
    """``{"flooder": {max, mean, final}, "others": {...}}``: the oldest eligible age (s) of tenant ``q0`` and
    the largest of the other tenants', over the measured seconds sampled (``intervals.csv``); None with one
    tenant."""
    if tenants <= 1:
        return None
    out = {}
    for who in ("flooder", "others"):
        values = [r[f"oldest_eligible_age_{who}_s"] for r in rows
                  if r.get(f"oldest_eligible_age_{who}_s") is not None]
        out[who] = _series(values, values[-1] if values else None)
    return out
