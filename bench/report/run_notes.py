"""The run report's sentences, from its ``summary.json`` or directory: the headline, the banners, the
autovacuum note and the claim's plan text."""

from __future__ import annotations

from pathlib import Path

from bench.report.format import fmt_num
from bench.report.run_format import fmt_value
from bench.results.dead_rows import growth_text, table_autovacuum
from bench.results.model import problems, process_name
from bench.results.values import library_caveat_line

__all__ = ["BACKLOG_DRY_TEXT", "banners", "claim_plan", "headline", "queue_notes", "vacuum_note",
           "workers_plan_label"]

BACKLOG_DRY_TEXT = ("backlog ran dry: throughput is bounded by the seeded backlog, "
                    "not by the queue")


def headline(config: dict, summary: dict | None = None) -> list[tuple[str, str]]:
    """(label, value) pairs under the title: the queue definition, policy, workers, batch and index, the
    workers' claim plan (:func:`workers_plan_label`), and the seconds in which the running workers changed,
    with how a web UI run ended."""
    items = [(k, fmt_value(config.get(k))) for k in ("policy", "workers", "batch", "index")]
    if config.get("queue") not in (None, "builtin"):  # a queue definition (queues/<name>/queue.toml)
        items.insert(0, ("queue", f"{config['queue']} (queue definition)"))
    workers = ((summary or {}).get("plans") or {}).get("workers")
    if workers is not None:
        items.append(("workers' claim plan", workers_plan_label(workers, config)))
    changes, ui = (summary or {}).get("worker_changes") or [], (summary or {}).get("web_ui")
    lost = [p for p in (summary or {}).get("processes") or [] if p.get("lost")]
    if changes or ui:
        parts = ["; ".join(f"{c['workers_before']} \u2192 {c['workers']} at {c['t_s']} s" for c in changes) or "none"]
        parts += [f"{process_name(p)} lost" + (f" from {p['missing_seconds'][0]} s"
                                                                   if p.get("missing_seconds") else "") for p in lost]
        if ui:
            stop = ui.get("stopped_at_t_s")
            parts.append("the run had Locust's web UI"
                         + (f", ended by its Stop at {stop:g} s" if stop is not None else ""))
        items.append(("worker count changes", "; ".join(parts)))
    return items


def workers_plan_label(workers: dict, config: dict) -> str:
    """The plan the workers' claim ran, from ``summary["plans"]["workers"]`` (with ``config`` for the
    plan cache mode when that entry lacks it), e.g.
    ``generic (prepared, PLAN_CACHE=auto; 1,234 generic / 40 custom executions)``."""
    plan = workers.get("plan") or "unknown"
    if plan == "unprepared":
        return "unprepared (PREPARED=0: planned with its values on every claim)"
    if plan == "text":
        return f"sent as text, planned with its values on every claim ({workers.get('scan') or 'plan not captured'})"
    counts = ("" if workers.get("generic_executions") is None else
              f"; {workers['generic_executions']:,} generic / {workers['custom_executions']:,} custom executions")
    return f"{plan} (prepared, PLAN_CACHE={workers.get('plan_cache') or config.get('plan_cache') or 'auto'}{counts})"


def banners(summary: dict) -> list[str]:
    """The red lines above the report, in order: plan warnings, clipped windows (``config_notes``), fault
    windows that never opened, every :func:`bench.results.model.problems` reason, a queue library's SQL-path
    caveat, ``uncheckable_invariants``, a backlog that ran dry, a saturated queue."""
    lines = list(summary.get("plan_warnings") or [])
    lines.extend(f"note: {n}" for n in summary.get("config_notes") or [])
    lines.extend(f"fault window {f} never opened: it starts after the measured window ended"
                 for f in summary.get("faults_not_opened") or [])
    lines.extend(problems(summary))
    if caveat := library_caveat_line(summary):
        lines.append(caveat)
    lines.extend(f"the audit cannot check {key} on this queue: {why}"
                 for key, why in (summary.get("uncheckable_invariants") or {}).items())
    lines.extend(f"note on the audit: {n}" for n in summary.get("audit_notes") or [])
    if summary.get("backlog_exhausted"):
        lines.append(BACKLOG_DRY_TEXT)
    if summary.get("saturated"):
        lines.append(f"the queue is {summary.get('saturation_verdict')}")
    return lines


def vacuum_note(summary: dict, growth: dict | None = None) -> str | None:
    """One to three sentences on vacuum of the queue table during the run: autovacuum/autoanalyze runs
    (with the run's ``AUTOVACUUM_SETTINGS``), the periodic VACUUM passes of ``VACUUM_EVERY_S``, and ``growth``
    (:func:`bench.results.dead_rows.dead_rows_growth` of the run) when its dead rows grew with no vacuum."""
    av = summary.get("autovacuum")
    if not av:
        return None
    if av.get("not_applicable"):
        return f"Autovacuum does not apply on this engine: {av['not_applicable']}."
    passes = summary.get("vacuum_passes")
    passes_text = ""
    if passes:
        duration = passes["duration_ms"]
        passes_text = (f" A plain VACUUM of the queue table every {passes['every_s']:g} s (VACUUM_EVERY_S) started "
                       f"{passes['count']} times in the measured window"
                       + (f", taking {fmt_num(duration['p50'], 1)} ms at the median and {fmt_num(duration['max'], 1)} ms at most."
                          if passes["count"] else "."))
    settings = av.get("settings")
    settings_text = (" with its own settings (" + ", ".join(f"{k} = {v:g}" for k, v in settings.items()) + ")"
                     if isinstance(settings, dict) and settings else "")
    if av.get("server_autovacuum") is False:
        blocked = av.get("server_blocked") or "autovacuum = off"  # a run before server_blocked: autovacuum only
        table = (", whatever the queue table's autovacuum_enabled says (AUTOVACUUM on, to no effect)"
                 if table_autovacuum(summary.get("config") or {}) else "")
        first = (f"Autovacuum is off on this server ({blocked}): autovacuum never runs there{table}, and nothing "
                 "autovacuumed or autoanalyzed the queue table during the run"
                 + ("." if passes else ", so cached claim plans were never rebuilt and dead tuples stayed."))
    elif not av.get("enabled"):
        first = "Autovacuum was off on the queue table for this run (AUTOVACUUM=0, --no-autovacuum)."
    elif av.get("autovacuum_runs") is None:
        first = "Whether autovacuum ran during the run is unknown (the database went away)."
    elif not av.get("autovacuum_runs") and not av.get("autoanalyze_runs"):
        first = f"Autovacuum and autoanalyze did not run on the queue table{settings_text} during the run."
    else:
        first = (f"During the run autovacuum ran {av['autovacuum_runs']} and autoanalyze {av['autoanalyze_runs']} "
                 f"times on the queue table{settings_text}; each analyze invalidates the workers' cached claim "
                 "plans, which PostgreSQL then plans again on the table as it is.")
    grew = f" In the measured window the queue table's {growth_text(growth)}." if growth else ""
    return first + passes_text + grew


def claim_plan(run_dir: Path) -> str | None:
    """The captured EXPLAIN text of one claim, if the run has one."""
    path = run_dir / "claim_plan.txt"
    return path.read_text(encoding="utf-8").rstrip() if path.is_file() else None


def queue_notes(summary: dict) -> list[tuple[str, str]]:
    """(term, text) pairs of "The queue under test" for a queue definition: its file and table, and for a
    queue library how it was driven and what its plan figures mean; [] for the built-in queue."""
    q = summary.get("queue_definition")
    if not q:
        return []
    out = [("definition", f"{q['name']}: {q.get('description') or ''} ({q['path']}; queue table {q['table']})")]
    library = q.get("library")
    if library:
        out.append(("queue library", f"{library['package']} {library['version']}"))
        out.append(("how it was driven", library.get("measurement") or ""))
        if library.get("plans"):
            out.append(("what the plan figures mean here", library["plans"]))
    return out
