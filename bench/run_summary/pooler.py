"""What a run behind a pooler knew and measured of it (docs/poolers.md, "Reading the pooler figures"): the lines it
prints before the load (:func:`pooler_lines`: detection, the console's settings, a mode that disagrees with
``POOL_MODE``), ``summary.json`` ``pooler`` over the measured window (:func:`pooler_figures`) and its terminal line
(:func:`pooler_line`). The counters are PgBouncer's (https://www.pgbouncer.org/usage.html, "SHOW POOLS", "SHOW
STATS"); it keeps no distribution of the waits, so every wait figure here is a mean or a maximum, never a
percentile."""

from __future__ import annotations

from typing import Any

from bench.run_summary.rows import column
from bench.usage import setting

#: Why the pooler's own figures are missing without a console to read them on.
NO_CONSOLE = "not measured: no console to read (POOLER_ADMIN_DSN not given)"
#: Why the pooler's CPU is missing for a user's pooler: its process is not one the tool started.
CPU_NOT_MEASURED = "not measured: the pooler's process is not one the run started"
#: What detection concludes when the pooler handed out server connections per transaction.
DETECTED = "transaction pooling detected"


def mode_disagreements(pool_mode: str, facts: dict | None) -> list[str]:
    """Each way what the run found of the pooler disagrees with ``POOL_MODE`` (the console's ``pool_mode``;
    detection), in words; [] when nothing does."""
    facts, found = facts or {}, []
    console = facts.get("console") or {}
    if console.get("pool_mode") and console["pool_mode"] != pool_mode:
        found.append(f"its console says pool_mode {console['pool_mode']}, and {setting('pool_mode', pool_mode)} was "
                     "given")
    detection = facts.get("detection") or {}
    concluded = detection.get("concluded")
    if concluded == DETECTED and pool_mode != "transaction":
        found.append(f"{concluded}, and {setting('pool_mode', pool_mode)} was given: the sessions keep state on the "
                     "server (named statements, SET) that a transaction pool does not keep; expect 26000/42P05 "
                     f"errors; give {setting('pool_mode', 'transaction')}")
    elif concluded and concluded != DETECTED and pool_mode == "transaction":
        found.append(f"{concluded}, and {setting('pool_mode', pool_mode)} was given: the pooler handed the same "
                     "server connection back (a quiet transaction pool does) or does not pool per transaction; the "
                     "sessions are stateless either way")
    return found


def pooler_lines(cfg: Any, facts: dict) -> list[str]:
    """The lines a run behind a pooler prints before the load: what detection concluded (a user's pooler), the
    console's settings, and each disagreement with ``POOL_MODE``."""
    lines = []
    detection = facts.get("detection")
    if detection:
        pids = detection.get("backend_pids")
        lines.append(f"pooler: pooling not determined ({detection['error']})" if "error" in detection else
                     f"pooler: {detection['concluded']} (client A's two transactions on backends {pids[0]} and "
                     f"{pids[2]}, client B's between them on {pids[1] if pids[1] is not None else 'none in time'})")
    console = facts.get("console")
    if console:
        lines.append(f"pooler console: not read ({console['error']})" if "error" in console else
                     f"pooler console: {console['version']}, pool_mode {console['pool_mode']}, default_pool_size "
                     f"{console['pool_size']}, max_client_conn {console['max_client_conn']}")
    lines += [f"pooler: {text}" for text in mode_disagreements(cfg.pool_mode, facts)]
    return lines


def _spread(values: list) -> dict:
    """``{mean, max}`` of ``values`` (None each when empty)."""
    return {"mean": round(sum(values) / len(values), 1) if values else None, "max": max(values, default=None)}


def _mean_of(rows: list[dict], part: str, whole: str) -> float | None:
    """The sum of ``part`` over the sum of ``whole``, over the seconds that have both (a missed or reset second
    counts in neither); None when nothing was counted."""
    both = [(r[part], r[whole]) for r in rows if r.get(part) is not None and r.get(whole) is not None]
    total = sum(w for _, w in both)
    return round(sum(p for p, _ in both) / total, 1) if total else None


def pooler_figures(rows: list[dict], run_info: dict, cpu_limit_pct: float) -> dict | None:
    """``summary.json`` ``pooler`` over the measured ``rows``; None without a pooler. ``cpu_limit_pct``: the load
    generator's CPU limit, which the single-threaded pooler's process is judged by too."""
    info = run_info.get("pooler")
    if not info:
        return None
    out = {"embedded": info.get("embedded"), "pool_mode": info.get("pool_mode"),
           "detection": (info.get("detection") or {}).get("concluded"), "console": info.get("console"),
           "mode_disagrees": info.get("mode_disagrees") or []}
    sampled = [r for r in rows if r.get("pooler_cl_active") is not None]
    if not sampled:
        return {**out, "measured": False, "not_measured": NO_CONSOLE if not info.get("console_source") else
                "not measured: no console read succeeded", "sampler_errors": info.get("sampler_errors")}
    cpu = column(rows, "pooler_cpu_pct")
    return {**out, "measured": True, "source": info.get("console_source"), "seconds_sampled": len(sampled),
            "sampler_errors": info.get("sampler_errors"),
            "clients_active": _spread(column(rows, "pooler_cl_active")),
            "clients_waiting": _spread(column(rows, "pooler_cl_waiting")),
            "seconds_with_waiting": sum(1 for r in sampled if r["pooler_cl_waiting"] > 0),
            "maxwait_us_max": max(column(rows, "pooler_maxwait_us"), default=None),
            "transactions": sum(column(rows, "pooler_xacts")), "queries": sum(column(rows, "pooler_queries")),
            "wait_mean_us": _mean_of(rows, "pooler_wait_us", "pooler_xacts"),
            "xact_mean_us": _mean_of(rows, "pooler_xact_time_us", "pooler_xacts"),
            "query_mean_us": _mean_of(rows, "pooler_query_time_us", "pooler_queries"),
            "server_active": _spread(column(rows, "pooler_sv_active")),
            "server_idle": _spread(column(rows, "pooler_sv_idle")),
            "server_used_max": max(column(rows, "pooler_sv_used"), default=None),
            "server_conns_max": max(column(rows, "pooler_server_conns"), default=None),
            "cpu_pct": _spread(cpu) if cpu else None,
            "cpu_not_measured": None if cpu else CPU_NOT_MEASURED, "cpu_limit_pct": cpu_limit_pct}


def pooler_line(p: dict) -> str:
    """The terminal's line of the ``pooler`` block."""
    mode = f"pooler ({p['embedded'] or 'yours'}, {p['pool_mode']})"
    if not p["measured"]:
        return f"{mode}: {p['not_measured']}" + (f"; {p['detection']}" if p.get("detection") else "")

    def us(value):
        return "n/a" if value is None else f"{value / 1000:,.3f} ms"
    cpu = (f"; its CPU mean {p['cpu_pct']['mean']:g} %, max {p['cpu_pct']['max']:g} % of a core"
           if p["cpu_pct"] else "")
    return (f"{mode}: clients waiting mean {p['clients_waiting']['mean']:g}, max {p['clients_waiting']['max']} "
            f"({p['seconds_with_waiting']} of {p['seconds_sampled']} s), oldest wait max {us(p['maxwait_us_max'])}, "
            f"mean wait per transaction {us(p['wait_mean_us'])}; server connections active mean "
            f"{p['server_active']['mean']:g} (max {p['server_active']['max']}), idle mean {p['server_idle']['mean']:g}, "
            f"{p['server_conns_max']} at most; mean transaction {us(p['xact_mean_us'])}, mean query "
            f"{us(p['query_mean_us'])}{cpu}")
