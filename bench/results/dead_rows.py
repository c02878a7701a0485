"""Whether autovacuum could take the queue table, and whether a run's dead rows grew with no vacuum: the one rule,
read from a run's own files (``run.json``'s ``server_settings`` and ``config``, ``intervals.csv``) by the run's
terminal line, its report and the capacity plan (docs/capacity-plan.md, "When the confirmation fails on vacuum").
Standard library only."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any, Iterable, Mapping

#: Server settings without which autovacuum never runs, whatever a table's ``autovacuum_enabled`` says: the
#: launcher itself, and the statistics it decides by ("track_counts must also be enabled for autovacuum to work",
#: https://www.postgresql.org/docs/current/runtime-config-autovacuum.html#GUC-AUTOVACUUM).
SERVER_SWITCHES = ("autovacuum", "track_counts")

#: Dead rows "grew" when the last sample holds at least this many times the first (and more than the table's
#: vacuum threshold): set before looking at any run, as the least growth that says dead rows piled up in the
#: window rather than sat at the level the window started with: doubled, so the window made more dead rows than
#: the table held when it began.
GROWTH_FACTOR = 2.0

_UNITS_S = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def server_blocks_autovacuum(server_settings: Mapping[str, Any] | None) -> str | None:
    """``"autovacuum = off"`` or ``"track_counts = off"`` (the first of :data:`SERVER_SWITCHES` that is off in
    ``run.json``'s ``server_settings``): autovacuum never runs on that server; None when both are on or the
    server has no such settings (MariaDB: no autovacuum at all)."""
    for name in SERVER_SWITCHES:
        value = (server_settings or {}).get(name)
        if value is not None and str(value).lower() in ("off", "false", "0"):
            return f"{name} = {value}"
    return None


def table_autovacuum_ineffective(config: Mapping[str, Any], server_settings: Mapping[str, Any] | None) -> str | None:
    """The server setting (``"autovacuum = off"``) that makes the run's ``AUTOVACUUM`` (on by default, the queue
    table's ``autovacuum_enabled``) of no effect; None when the table's autovacuum could run or was off anyway."""
    return server_blocks_autovacuum(server_settings) if table_autovacuum(config) is True else None


def table_autovacuum(config: Mapping[str, Any]) -> bool | None:
    """A run's ``AUTOVACUUM`` from its ``config``: True/False (``"on"``/``"off"`` in older runs, a choice then);
    None when the run has none (MariaDB: ``n/a``)."""
    value = config.get("autovacuum")
    if isinstance(value, bool) or value is None:
        return value
    return {"on": True, "off": False}.get(str(value).lower())


def _seconds(text: Any) -> float | None:
    """``'1min'``, ``'60s'``, ``'500ms'`` (``SHOW`` of a time setting) in seconds; a bare number is seconds."""
    found = re.fullmatch(r"\s*([0-9.]+)\s*([a-z]*)\s*", str(text or ""))
    if not found or found.group(2) not in ("", *_UNITS_S):
        return None
    return float(found.group(1)) * _UNITS_S.get(found.group(2), 1.0)


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def vacuum_threshold(run: Mapping[str, Any], live_rows: float) -> float | None:
    """The queue table's autovacuum threshold in dead rows: ``autovacuum_vacuum_threshold +
    autovacuum_vacuum_scale_factor × live rows``, the run's ``AUTOVACUUM_SETTINGS`` over the server's (the formula:
    https://www.postgresql.org/docs/current/routine-vacuuming.html#AUTOVACUUM); None without those settings."""
    own = (run.get("config") or {}).get("autovacuum_settings")
    settings = {**(run.get("server_settings") or {}), **(own if isinstance(own, Mapping) else {})}
    base = _number(settings.get("autovacuum_vacuum_threshold"))
    scale = _number(settings.get("autovacuum_vacuum_scale_factor"))
    return None if base is None or scale is None else base + scale * max(live_rows, 0.0)


def dead_rows_growth(rows: Iterable[Mapping[str, Any]], run: Mapping[str, Any]) -> dict[str, Any] | None:
    """The queue table's dead rows over a run's measured seconds (``intervals.csv`` rows: ``t_s``, ``dead_tuples``,
    ``table_tuples`` = live + dead, ``autovacuum_count``, ``vacuum_passes``) when they grew with no vacuum pass:
    the last sample at least :data:`GROWTH_FACTOR` × the first and above :func:`vacuum_threshold` (so a pass was
    due), ``autovacuum_count`` unchanged and no ``VACUUM_EVERY_S`` pass, and either autovacuum could not run or the
    window outlasted ``autovacuum_naptime`` (the launcher woke at least once). Returns ``{"start", "end",
    "window_s", "threshold", "why_none"}`` (``why_none``: :func:`table_autovacuum_ineffective`, ``"AUTOVACUUM=0"``,
    or None), else None."""
    sampled = [r for r in rows if _number(r.get("dead_tuples")) is not None]
    if len(sampled) < 2:
        return None
    first, last = sampled[0], sampled[-1]
    start, end = _number(first["dead_tuples"]), _number(last["dead_tuples"])
    window_s = (_number(last.get("t_s")) or 0.0) - (_number(first.get("t_s")) or 0.0) + 1
    counts = [c for c in (_number(r.get("autovacuum_count")) for r in sampled) if c is not None]
    passes = sum(_number(r.get("vacuum_passes")) or 0.0 for r in rows)
    live = (_number(last.get("table_tuples")) or end) - end
    threshold = vacuum_threshold(run, live)
    if threshold is None or end < GROWTH_FACTOR * max(start, 1.0) or end <= threshold:
        return None
    if passes or (counts and max(counts) > min(counts)):
        return None
    config, settings = run.get("config") or {}, run.get("server_settings") or {}
    blocked = table_autovacuum_ineffective(config, settings)
    why_none = (f"{blocked} on this server" if blocked else "AUTOVACUUM=0" if table_autovacuum(config) is False
                else None)
    naptime_s = _seconds(settings.get("autovacuum_naptime"))
    if why_none is None and (naptime_s is None or window_s <= naptime_s):
        return None  # autovacuum could run but its launcher need not have woken in the window
    return {"start": int(start), "end": int(end), "window_s": int(window_s), "threshold": int(threshold),
            "why_none": why_none}


def growth_text(growth: Mapping[str, Any]) -> str:
    """'dead rows grew from 1,198 to 61,720 with no autovacuum pass in 120 s (autovacuum = off on this server)'."""
    why = growth.get("why_none")
    return (f"dead rows grew from {growth['start']:,} to {growth['end']:,} with no autovacuum pass in "
            f"{growth['window_s']:,} s" + (f" ({why})" if why else ""))


def intervals_rows(run_dir: Path) -> list[dict[str, str]]:
    """``run_dir/intervals.csv`` as rows of text (``[]`` when the file is missing); OSError when unreadable."""
    path = Path(run_dir) / "intervals.csv"
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
