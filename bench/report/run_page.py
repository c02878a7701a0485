"""One run's report, ``report.html``, rendered from its result files alone; its parts are in ``run_data``,
``run_notes``, ``run_tables``, ``run_figures`` and ``run_plots``."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report.render import write_page
from bench.report.run_data import ReportError, load_run
from bench.report.network_page import relay_rows
from bench.report.pooler_page import pooler_rows
from bench.report.replica_page import replica_rows
from bench.report.wait_events_page import wait_event_rows
from bench.report.run_figures import run_figures
from bench.report.run_format import fmt_value
from bench.report.run_notes import banners, claim_plan, headline, queue_notes, vacuum_note
from bench.report.run_tables import env_rows, latency_rows, plan_rows, process_rows, summary_rows
from bench.results import verdict
from bench.results.dead_rows import dead_rows_growth, table_autovacuum_ineffective

__all__ = ["ReportError", "render_report"]

TEMPLATE_NAME = "report.html.j2"


def render_report(run_dir: Path) -> Path:
    """Render ``run_dir/report.html`` (UTF-8, self-contained: figures as base64 PNG data URIs, each also
    written to ``run_dir/plots/<name>.png``) from ``run.json``, ``intervals.csv`` and ``summary.json``;
    returns its path. Raises ReportError when a required file is absent (named), a JSON file does not parse,
    or ``intervals.csv`` lacks a plotted column."""
    run_dir = Path(run_dir)
    run, summary, intervals = load_run(run_dir)
    config = {**(summary.get("config") or {}), **(run.get("config") or {})}
    figures = run_figures(run_dir, intervals, summary)

    context = {
        "run_id": summary.get("run_id") or run.get("run_id") or run_dir.name,
        "engine": config.get("engine") or "postgres",
        "headline": headline(config, summary),
        "banners": banners(summary),
        "queue_notes": queue_notes(summary),
        "monitor_notes": list(summary.get("monitor_notes") or []),
        "vacuum_note": vacuum_note(summary, dead_rows_growth(intervals.to_dict("records"), run)),
        "claim_plan": claim_plan(run_dir),
        "plan_rows": plan_rows(summary),
        "verdict": verdict.items(summary),
        "operations": verdict.operations(summary),
        **_split_rows(summary_rows(summary, config)),
        "latency_rows": latency_rows(summary),
        "process_rows": process_rows(summary),
        "replica_rows": replica_rows(summary),
        "pooler_rows": pooler_rows(summary),
        "relay_rows": relay_rows(summary),
        "wait_event_rows": wait_event_rows(summary),
        "figures": figures,
        **_config_rows(config, run.get("config_defaults"), run.get("server_settings")),
        "run_files": sorted(f.name + ("/" if f.is_dir() else "") for f in run_dir.iterdir()
                            if f.name != "report.html" and not f.name.startswith(".")),
        "env_rows": env_rows(run, summary),
        "server_settings": [(k, fmt_value(v))
                            for k, v in sorted((run.get("server_settings") or {}).items())],
    }
    return write_page(TEMPLATE_NAME, run_dir / "report.html", **context)


#: What a counter that did not count anything reads as in the summary table.
_NOTHING = {"0", "0.0", "0.00", "0.000", "0 %", "0.0 %", "none", "n/a", "no", "0 B"}


def _split_rows(rows: list[dict]) -> dict[str, list[dict]]:
    """The summary table's rows: ``summary_rows`` those that say something (or are red), ``quiet_rows`` the
    counters that stayed at zero or none, shown folded."""
    quiet = [r for r in rows if not r.get("bad") and str(r["value"]).strip() in _NOTHING]
    return {"summary_rows": [r for r in rows if r not in quiet], "quiet_rows": quiet}


def _config_rows(config: dict, defaults: dict | None, server_settings: dict | None = None) -> dict[str, list]:
    """``config_rows`` (name, value) of every parameter, and ``changed_rows`` (name, value, default) of those
    that differ from ``run.json``'s ``config_defaults`` (None: nothing is called changed; ``n/a`` is no
    change). ``autovacuum`` on a server where autovacuum never runs says so beside its value."""
    blocked = table_autovacuum_ineffective(config, server_settings)
    rows = [(k, fmt_value(v) + (f" (no effect: {blocked} on this server)" if k == "autovacuum" and blocked else ""))
            for k, v in config.items() if k != "notes"]  # notes: banners
    if not defaults:
        return {"config_rows": rows, "changed_rows": None}
    changed = [(k, fmt_value(v), fmt_value(defaults[k])) for k, v in config.items()
               if k in defaults and v != "n/a" and json.dumps(v, sort_keys=True, default=str) != json.dumps(defaults[k], sort_keys=True, default=str)]
    return {"config_rows": rows, "changed_rows": changed}
