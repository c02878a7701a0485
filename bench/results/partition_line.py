"""A ``partition`` window of ``summary.json`` in one line, for the run's last lines and its report (the figures:
:mod:`bench.run_summary.partition`)."""

from __future__ import annotations


def partition_line(p: dict) -> str:
    """One partition window in a line: who noticed and when, errors, reconnections, leases, the audit."""
    noticed = (f"{p['noticed']} of {p['workers']} workers noticed, p50 {p['noticed_s']['p50']:g} s, max "
               f"{p['noticed_s']['max']:g} s after it began" if p["noticed"]
               else f"none of {p['workers']} workers noticed")
    bound = ("" if p["bound_s"] is None else f" (bound {p['bound_s']:g} s: " +
             (f"late or never: {', '.join(p['late'])})" if p["late"] else "all within)"))
    errors = ", ".join(f"{kind} {n}" for kind, n in sorted(p["errors"].items())) or "none"
    back = p["reconnected_after_heal_s"]
    again = (f"{p['reconnections']} reconnected, p50 {back['p50']:g} s, max {back['max']:g} s after the heal"
             if p["reconnections"] else "none reconnected")
    return (f"partition {p['start_s']:g}–{p['end_s']:g} s: {noticed}{bound}; errors {errors}; {again}; "
            f"{p['lease_expiries']} leases expired (reaper); audit after the heal "
            f"{'clean' if p['audit_clean'] else 'NOT clean'}")
