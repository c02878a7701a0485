"""``summary.json``'s vacuum blocks: autovacuum during the run, and the periodic VACUUM passes."""

from __future__ import annotations

from bench.config.run_config import RunConfig
from bench.results.dead_rows import server_blocks_autovacuum
from bench.run_summary.rows import percentile


def vacuum_during(before: dict, after: dict | None, cfg: RunConfig, server_settings: dict | None = None) -> dict:
    """Autovacuum and autoanalyze runs on the queue table between the end of seeding and the end of the run,
    with ``settings`` (``AUTOVACUUM_SETTINGS`` by full name), ``reloptions`` (``{table: ["name=value", …]}``
    per leaf, after prepare), ``naptime_s``, ``watched_s`` (server seconds between the counts) and, when so,
    ``unobservable`` (why no run says nothing), and ``server_blocked``, the server setting that keeps autovacuum
    from running at all (``"autovacuum = off"``, ``"track_counts = off"``: :func:`server_blocks_autovacuum` of
    ``server_settings``, run.json's) or None; ``{"not_applicable": why}`` on an engine without vacuum."""
    if "not_applicable" in before:
        return {"not_applicable": before["not_applicable"]}
    blocked = server_blocks_autovacuum(server_settings) or (None if before["server_autovacuum"] else "autovacuum = off")
    enabled = cfg.autovacuum is True and blocked is None
    settings = {"enabled": enabled, "server_autovacuum": blocked is None, "server_blocked": blocked,
                "settings": cfg.public()["autovacuum_settings"], "reloptions": before.get("reloptions")}
    if after is None:
        return {**settings, "autovacuum_runs": None, "autoanalyze_runs": None}
    out = {**settings,
           "autovacuum_runs": after["autovacuum_count"] - before["autovacuum_count"],
           "autoanalyze_runs": after["autoanalyze_count"] - before["autoanalyze_count"],
           "last_autovacuum": after["last_autovacuum"], "last_autoanalyze": after["last_autoanalyze"]}
    if cfg.autovacuum is True and blocked:
        out["unobservable"] = f"the server runs with {blocked}: no per-table setting can make autovacuum run"
    naptime_s, watched_s = before.get("naptime_s"), _watched_s(before, after)
    if naptime_s is not None and watched_s is not None:
        out.update(naptime_s=naptime_s, watched_s=round(watched_s, 1))
        if enabled and not out["autovacuum_runs"] and naptime_s >= watched_s:
            out["unobservable"] = (f"the server's autovacuum_naptime ({naptime_s:g} s) is not shorter than the "
                                   f"{watched_s:.0f} s the run watched: its launcher may not have woken once, so "
                                   "no autovacuum run says nothing about the settings")
    return out


def _watched_s(before: dict, after: dict) -> float | None:
    """Seconds of server time between the two vacuum counts, or None when either has no clock."""
    if before.get("at_s") is None or after.get("at_s") is None:
        return None
    return after["at_s"] - before["at_s"]


def vacuum_passes(cfg: RunConfig, passes: list[tuple[float, float]], n_warm: int, rows: list[dict]) -> dict | None:
    """``summary.json``'s ``vacuum_passes``, None without ``VACUUM_EVERY_S``: ``{"every_s", "count",
    "duration_ms": {"p50", "max"} (nearest rank; None without a pass), "run_count"}`` of the passes that
    started in the measured seconds (``rows``' ``t_s``; second ``k`` of the load is ``t_s + n_warm``);
    ``run_count`` over the whole run."""
    if not cfg.vacuums():
        return None
    seconds_measured = {r["t_s"] + n_warm for r in rows}
    ms = [d * 1000 for start, d in passes if int(start) in seconds_measured]
    p50, top = percentile(ms, 50), max(ms, default=None)
    return {"every_s": cfg.vacuum_every_s, "count": len(ms),
            "duration_ms": {"p50": None if p50 is None else round(p50, 3), "max": None if top is None else round(top, 3)},
            "run_count": len(passes)}
