"""``summary.json`` of one run: the figures over the measured window, the invariants, and whether
the run is trustworthy (``suspect`` and its reasons), from what the run measured and audited."""

from __future__ import annotations

import math
from collections import Counter
from typing import Callable

from bench.analysis.queue_verdict import saturation as _saturation
from bench.config.run_config import RunConfig
from bench.analysis.claim_growth import claim_growth
from bench.analysis.empty_claims import empty_while_work_waited
from bench.analysis import fairness
from bench.config.faults import OPTIONS as FAULT_OPTIONS
from bench.measure import metrics, seconds
from bench.measure.rss import RSS_REPORTED_MIN
from bench.results import slo
from bench.results.values import library_caveat_line
from bench.results.verdict import end_block
from bench.workload import jobs


#: Above this harness CPU (% of one core) the load generator may be the bottleneck.
SUSPECT_CPU_PCT = 90.0


#: Above this event-loop lag p99 (µs) over the measured window the load generator is saturated
#: and the run suspect. It is the probe's own period: a p99 above it means that in 1 % of ticks
#: the loop woke more than a whole period late (a 10 ms timer firing after 20 ms), so the process
#: is not keeping its own schedule. Every latency it measures ends when its greenlet runs again,
#: and each worker cycle waits for at least three wake-ups (claim reply, the work's timer,
#: completion reply): a lag of this size adds tens of ms to cycles that at the calibration
#: load (README "Calibration": pgbench 3,305 claim+complete transactions/s at 50 clients)
#: last 50 / 3,305 s = 15 ms, so the generator, not the database, sets the pace. A starved generator
#: reads low on CPU (it waits for a core), so the CPU rule alone misses it. Measured figures
#: behind the choice are in the README ("Event-loop lag").
SUSPECT_LOOP_LAG_P99_US = 10_000

#: Above this producer schedule lag p50 (ms) over the measured window, the open-loop producers ran
#: more than a second behind their schedule for most of their inserts: the queue was not offered
#: ``RATE`` (pgbench ``--rate`` reports the same schedule lag as the sign that the offered rate was
#: not sustained: https://www.postgresql.org/docs/current/pgbench.html, "--rate"), so the run
#: cannot answer what that rate does. Latencies stay honest: they are measured from the schedule.
SUSPECT_PRODUCER_LAG_P50_MS = 1000.0


def percentile(values: list[float], pct: float) -> float | None:
    """The ``pct`` percentile of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, math.ceil(pct / 100 * len(ordered)) - 1)  # nearest-rank
    return ordered[rank]


def no_completion_cause(cfg: RunConfig, counters: Counter, errors: Counter, work_s: float,
                        measured_s: float) -> str:
    """Why a window with no completed job had none, from what it counted: attempts that failed
    (retries, dead letters), errors by kind (deadlocks, lock timeouts, NOWAIT refusals, lost
    connections), jobs claimed whose work outlasts the window, or no claim finished at all.
    Every cause that applies is named, in that order; ``work_s`` is the mean work per job (s)."""
    causes = []
    ended = counters["dead_lettered"] + counters["reaper_dead_lettered"]
    if ended or counters["retries"]:
        causes.append(f"every attempt failed ({counters['retries']:,} retried, {ended:,} dead-lettered): "
                      "see FAIL_PROB, POISON_SHARE and MAX_ATTEMPTS")
    if errors:
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in errors.most_common(3))
        more = len(errors) - 3
        causes.append(f"{sum(errors.values()):,} errors ({kinds}{f', and {more} more kinds' if more > 0 else ''}): "
                      "claims or completions failed; see the errors table of the report")
    if counters["jobs_claimed"]:
        per_claim_s = work_s * cfg.batch
        n = counters["jobs_claimed"]
        causes.append(f"{n:,} job{'s were' if n != 1 else ' was'} claimed and none finished"
                      + (f": the work per claim, about {per_claim_s:,.2f} s, is not shorter than the "
                         f"{measured_s:,.1f} s window; use a longer DURATION or a shorter WORK_MS"
                         if per_claim_s >= measured_s else ""))
    if not causes:
        causes.append("no claim returned a job in the window: a claim may take longer than the window; "
                      "use a longer DURATION")
    return "; ".join(causes)


def worker_changes(rows: list[dict]) -> list[dict]:
    """The measured seconds in which the number of running workers changed (Locust's web UI, or a
    lost load generator process): ``[{"t_s", "workers_before", "workers"}]``, counted as each
    second ended; none in a run whose workers stayed as started."""
    changes, before = [], None
    for row in rows:
        now = row.get("workers")
        if before is not None and now is not None and now != before:
            changes.append({"t_s": row["t_s"], "workers_before": before, "workers": now})
        before = now if now is not None else before
    return changes


def summarize(run_id, cfg, measured: metrics.Window, rows, complete, max_rows_per_claim, audit_result, final_sample,
              monitor_failures, run_info, plan_warnings: Callable[[dict | None, dict], list[str]]) -> dict:
    """Build ``summary.json`` (docs/architecture.md keys plus ``suspect``, ``backlog_exhausted`` and
    details). ``plan_warnings`` is the engine's (:meth:`bench.engines.base.Engine.plan_warnings`)."""
    measured_s = measured.seconds
    counters = Counter(measured.counters)
    errors = Counter(measured.errors)
    claim = metrics.merge(measured, "claim_latency_us")
    complete_h = metrics.merge(measured, "complete_latency_us")
    pickup = metrics.merge(measured, "pickup_latency_us")
    ages = [r["oldest_eligible_age_s"] for r in rows if r.get("oldest_eligible_age_s") is not None]
    costs = [r["monitor_query_us"] for r in rows if r.get("monitor_query_us") is not None]
    notify_waiters = [r["notify_lock_waiters"] for r in rows if r.get("notify_lock_waiters") is not None]
    cpu_max = max((r["harness_cpu_pct"] for r in rows), default=0.0)
    # No eligible row at some sample (a count of 0, or no oldest eligible row at all).
    depth_zero = any(r.get("queue_depth") == 0 or r.get("oldest_eligible_age_s") == 0 for r in rows) or (
        final_sample["queue_depth"] == 0)
    # Without producers an empty queue means the seeded backlog ran out; with them it means keeping up.
    backlog_exhausted = depth_zero and cfg.rate == 0
    saturation = _saturation(cfg.rate, rows, counters, measured_s)
    growth = claim_growth(rows)
    reasons = []
    if cpu_max > SUSPECT_CPU_PCT:
        reasons.append(f"load generator CPU reached {cpu_max:.0f} % of a core (> {SUSPECT_CPU_PCT:.0f} %): "
                       "the harness may be the bottleneck")
    # The last row of an interrupted run is a partial second the monitor never reached.
    whole = rows if complete else rows[:-1]
    missed = sum(1 for r in whole if r.get("lock_waiters") is None)
    if missed:
        reasons.append(f"the monitor missed {missed} of {len(whole)} samples")
    # The work per job as measured around each job's sleep (a 1 ms sleep can take several ms on a
    # busy event loop); what the configuration asked for only when no job ran in the window.
    work_h = metrics.merge(measured, "work_duration_us")
    work_s = metrics.mean_value(work_h) / 1e6 if work_h.get_total_count() else jobs.expected_work_s(cfg)
    loop_lag = metrics.merge(measured, "loop_lag_us")
    if loop_lag.get_total_count() and seconds.p99_of(loop_lag) > SUSPECT_LOOP_LAG_P99_US:
        claim_p99_us = seconds.p99_of(claim) if claim.get_total_count() else None
        reasons.append(f"event-loop lag p99 {seconds.p99_of(loop_lag) / 1000:,.2f} ms "
                       f"(> {SUSPECT_LOOP_LAG_P99_US / 1000:g} ms): the load generator waited for a core, so it "
                       "may set the pace instead of the database, and each latency it measured (claim p99 "
                       f"{seconds.fmt_ms(claim_p99_us)}) may include that much of its own delay")
    claim_mean_s = (metrics.mean_value(claim) / 1e6) if claim.get_total_count() else 0.0
    cycle_s = claim_mean_s + work_s * cfg.batch + ((metrics.mean_value(complete_h) / 1e6) if complete_h.get_total_count() else 0.0)
    if measured_s and cycle_s * 5 > measured_s:
        reasons.append(f"one worker cycle (claim + work + completion) takes about {cycle_s:,.2f} s, so the "
                       f"{measured_s:,.1f} s window holds fewer than 5 per worker: throughput is quantised; "
                       "use a longer DURATION")
    if work_s * cfg.batch > cfg.lease_s:
        reasons.append(f"the work per claim (about {work_s * cfg.batch:,.2f} s) outlasts the lease "
                       f"({cfg.lease_s:g} s): completions arrive after the lease expired"
                       + ("" if cfg.reaper_interval_s > 0 else ", and with no reaper nothing takes the jobs back"))
    producer_lag = metrics.merge(measured, "producer_lag_us")
    if cfg.rate > 0 and producer_lag.get_total_count():
        lag_p50_ms = producer_lag.get_value_at_percentile(50) / 1000.0
        if lag_p50_ms > SUSPECT_PRODUCER_LAG_P50_MS:
            arrived = counters["jobs_produced"] / measured_s if measured_s else 0.0
            reasons.append(f"the producers ran {lag_p50_ms / 1000:,.1f} s behind their schedule (lag p50 > "
                           f"{SUSPECT_PRODUCER_LAG_P50_MS / 1000:g} s): {arrived:,.1f} jobs/s arrived of RATE "
                           f"{cfg.rate:g}, so the queue was not offered RATE (each insert takes longer than "
                           "PRODUCERS / RATE allows: add PRODUCERS, or the database is saturated)")
    if run_info.get("database_lost"):
        reasons.append(f"the database went away during the run ({run_info['database_lost']}); "
                       "the end-of-run audit could not run, so the invariants are unknown")
    notes = monitor_notes(rows, monitor_failures, run_info["monitor_table_cost_s"],
                           run_info["monitor_table_query_in_flight_s"])
    processes = run_info.get("processes") or []
    for process in processes if len(processes) > 1 else []:  # one saturated process sets the pace
        lag = process.get("loop_lag_p99_us")
        if lag is not None and lag > SUSPECT_LOOP_LAG_P99_US:
            reasons.append(f"load generator process {process['process']}: event-loop lag p99 {lag / 1000:,.2f} ms "
                           f"(> {SUSPECT_LOOP_LAG_P99_US / 1000:g} ms): that process waited for a core")
        if (process.get("cpu_max_pct") or 0) > SUSPECT_CPU_PCT:
            reasons.append(f"load generator process {process['process']}: CPU reached {process['cpu_max_pct']:.0f} % "
                           f"of a core (> {SUSPECT_CPU_PCT:.0f} %)")
    details = audit_result.get("details") or {}
    if counters["jobs_claimed"] and details.get("jobs_claimed_distinct") == 0:
        # A claim log that reached the audit empty (its events were never gathered) checks nothing:
        # its clean invariants would be a figure that was never measured.
        reasons.append(f"the claim log holds none of the {counters['jobs_claimed']:,} jobs claimed: the audit's "
                       "checks that read it (double claims, stale completions, redeliveries) checked nothing")
    killed = counters["process_kills"]  # FAULTS=process_kill: a library worker process lost on purpose
    for process in processes:
        if process.get("lost") and process.get("role"):  # a queue library's own worker process
            if killed:
                killed -= 1
                continue
            missed = process.get("missing_seconds") or []
            reasons.append(f"library worker process {process['process']} exited with status "
                           f"{process.get('exit_status')} ({process.get('exit_reason')})"
                           + (f" from second {missed[0]} of the measured window on" if missed else "")
                           + ": the rest of the window ran without its workers, and the jobs it held waited for "
                             "the library's own recovery")
        elif process.get("lost"):
            missed = process.get("missing_seconds") or []
            reasons.append(f"load generator process {process['process']} was lost"
                           + (f" from second {missed[0]} of the measured window on" if missed else "")
                           + ": its workers stopped with it, and the claim log misses its events after its last "
                             "flush (up to a second), so what is read from the log (redeliveries, double claims) "
                             "can be low; lost and duplicated jobs are read from the database and are complete")
    if backlog_exhausted:
        reasons.append("the backlog ran dry: throughput is bounded by the seeded backlog")
    if measured_s and counters["jobs_completed"] == 0:
        reasons.append("no job was completed in the measured window, so there is no throughput or latency to "
                       f"report: {no_completion_cause(cfg, counters, errors, work_s, measured_s)}")
    summary = {
        "run_id": run_id,
        "complete": complete,
        "config": cfg.public(),
        "measured_s": round(measured_s, 3),
        "measured_start": run_info["measured_start"],
        "measured_end": run_info["measured_end"],
        "throughput_jobs_per_s": round(counters["jobs_completed"] / measured_s, 2) if measured_s else None,
        "claims_per_s": round(counters["claims"] / measured_s, 2) if measured_s else None,
        "jobs_claimed": counters["jobs_claimed"],
        "jobs_completed": counters["jobs_completed"],
        "empty_claims": counters["empty_claims"],
        "max_rows_per_claim": max_rows_per_claim,
        "claim_latency_us": metrics.latency_summary(claim),
        "complete_latency_us": metrics.latency_summary(complete_h),
        "pickup_latency_ms": metrics.latency_summary(pickup, scale=1000.0),
        "oldest_eligible_age_s": {
            "max": max(ages) if ages else None,
            "p95": percentile(ages, 95),
            "final": ages[-1] if ages else None,  # the last sample inside the measured window
        },
        "errors": dict(errors),
        "invariants": audit_result["invariants"],
        # a queue definition's audit: the invariants it cannot check there, with why (never reported as 0)
        "uncheckable_invariants": audit_result.get("uncheckable") or {},
        "queue_definition": run_info.get("queue_definition"),
        "audit_notes": audit_result.get("notes") or [],
        "harness_cpu_max_pct": cpu_max,
        "harness_cpu_limit_pct": SUSPECT_CPU_PCT,
        "suspect": bool(reasons),
        "suspect_reasons": reasons,
        "backlog_exhausted": bool(backlog_exhausted),
        "stale_completions": counters["stale_completions"],
        "retries": counters["retries"],
        "dead_lettered": counters["dead_lettered"] + counters["reaper_dead_lettered"],
        "lease_expiries": counters["lease_expiries"],
        "redeliveries": audit_result["redeliveries"],
        "fifo_out_of_order_share": audit_result.get("fifo_out_of_order_share"),
        "offered_rate_jobs_per_s": cfg.rate or None,
        "jobs_produced": counters["jobs_produced"],
        "producer_lag_ms": metrics.latency_summary(metrics.merge(measured, "producer_lag_us"), scale=1000.0),
        **saturation,
        "nowait_retries": counters["nowait_retries"],
        # FR-10: idle waits ended by a producer's notification (WAKEUP=notify), and the sessions the
        # monitor saw waiting on the notify lock at commit (Lock:object) in its per-second samples.
        # the tool's own workers' count; a library's own worker wakes by itself, uncounted (None)
        "notify_wakeups": None if cfg.library_mode == "worker" else counters["notify_wakeups"],
        "notify_lock_waiters": {"max": max(notify_waiters) if notify_waiters else None,
                                "mean": round(sum(notify_waiters) / len(notify_waiters), 3) if notify_waiters else None},
        "monitor_query_us": {"mean": round(sum(costs) / len(costs), 1) if costs else None,
                             "max": max(costs) if costs else None},
        "monitor_failures": monitor_failures,
        "monitor_notes": notes,
        "database_lost": run_info.get("database_lost"),
        "faults": [{k: v for k, v in f.__dict__.items() if k in ("kind", "start_s", "end_s") or k in FAULT_OPTIONS[f.kind]}
                   for f in cfg.faults],
        "config_notes": list(cfg.notes),
        "worker_changes": worker_changes(rows),
        "web_ui": run_info.get("web_ui"),
        "crashed_claims": counters["crashed_claims"],
        "crashed_jobs": counters["crashed_jobs"],
        "rolled_back_claims": counters["rolled_back_claims"],
        "in_doubt_claims": counters["in_doubt_claims"],
        "late_completions": counters["late_completions"],
        "backend_kills": counters["backend_kills"],
        "process_kills": counters["process_kills"],
        "stalled_jobs_retried": counters["stalled_retried"],  # procrastinate's own retry of stalled jobs
        "status_counts": audit_result["status_counts"],
        "empty_claims_while_work_waited": empty_while_work_waited(
            cfg.public(), [r.get("jobs_claimed") for r in rows], [r.get("empty_claims") for r in rows],
            audit_result["status_counts"].get("pending", 0) if audit_result["status_counts"] else None)[0],
        "batch_wait_us": metrics.latency_summary(metrics.merge(measured, "batch_wait_us")),
        "dispatch_delay_us": metrics.latency_summary(metrics.merge(measured, "dispatch_delay_us")),
        "work_duration_us": metrics.latency_summary(work_h),
        "work_expected_ms": round(jobs.expected_work_s(cfg) * 1000.0, 3),
        "loop_lag_us": metrics.latency_summary(loop_lag),
        "loop_lag_limit_us": SUSPECT_LOOP_LAG_P99_US,
        "nowait_backoff_us": metrics.latency_summary(metrics.merge(measured, "nowait_backoff_us")),
        "monitor_errors": run_info.get("monitor_errors", {}),
        "archived_jobs": counters["archived_jobs"],
        "plans": run_info["claim_plans"],
        "claim_growth": growth,
        "plan_warnings": plan_warnings(run_info["claim_plans"]["workers"], growth),
        "autovacuum": run_info["autovacuum"],
        "vacuum_passes": run_info.get("vacuum_passes"),
        "claim_index_bytes": index_bytes(rows),
        "pg_stat_statements": run_info["pg_stat_statements"],
        "table_sizes": {"before": run_info["sizes_before"], "after": run_info["sizes_after"]},
        "audit": audit_result["details"],
        "harness_rss_mb": run_info["harness_rss_mb"],
        "processes": run_info.get("processes"),
        **fairness.per_queue_figures(audit_result.get("completed_per_queue")),
        "tenant_oldest_eligible_age_s": fairness.tenant_ages(rows, cfg.tenants),
    }
    summary["slo"] = slo.judge(cfg.slo, summary)  # last: it reads the trust rule over the whole summary
    return summary


def vacuum_during(before: dict, after: dict | None, cfg: RunConfig) -> dict:
    """Autovacuum and autoanalyze runs on the queue table between the end of seeding and the end of
    the run; an autoanalyze invalidates the workers' cached claim plans, which are then rebuilt. With
    ``settings`` (``AUTOVACUUM_SETTINGS`` by full name) and ``reloptions`` (what the server held for
    each leaf of the queue table after prepare, ``{table: ["name=value", …]}``), ``naptime_s`` (the
    server's ``autovacuum_naptime``) and ``watched_s`` (server seconds between the two counts); and
    ``unobservable`` (why no autovacuum run says nothing: the server's autovacuum is off, or its
    naptime is not shorter than the span watched) when that is so.
    ``{"not_applicable": why}`` on an engine without vacuum (its :meth:`~bench.engines.base.Engine.vacuum_counts`)."""
    if "not_applicable" in before:
        return {"not_applicable": before["not_applicable"]}
    enabled = cfg.autovacuum is True and before["server_autovacuum"]
    settings = {"enabled": enabled, "server_autovacuum": before["server_autovacuum"],
                "settings": cfg.public()["autovacuum_settings"], "reloptions": before.get("reloptions")}
    if after is None:
        return {**settings, "autovacuum_runs": None, "autoanalyze_runs": None}
    out = {**settings,
           "autovacuum_runs": after["autovacuum_count"] - before["autovacuum_count"],
           "autoanalyze_runs": after["autoanalyze_count"] - before["autoanalyze_count"],
           "last_autovacuum": after["last_autovacuum"], "last_autoanalyze": after["last_autoanalyze"]}
    if cfg.autovacuum is True and not before["server_autovacuum"]:
        out["unobservable"] = "the server's autovacuum is off: no per-table setting can make it run"
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
    """``summary.json``'s ``vacuum_passes``: the periodic VACUUMs (``VACUUM_EVERY_S``) that started in the
    measured window's seconds (``rows``' ``t_s``; second ``k`` of the load is ``t_s + n_warm``):
    ``{"every_s", "count", "duration_ms": {"p50", "max"} (nearest rank; None without a pass),
    "run_count"}`` (``run_count``: passes over the whole run, warm-up and stop phase included).
    None when the run had no periodic VACUUM."""
    if not cfg.vacuums():
        return None
    seconds_measured = {r["t_s"] + n_warm for r in rows}
    ms = [d * 1000 for start, d in passes if int(start) in seconds_measured]
    p50, top = percentile(ms, 50), max(ms, default=None)
    return {"every_s": cfg.vacuum_every_s, "count": len(ms),
            "duration_ms": {"p50": None if p50 is None else round(p50, 3), "max": None if top is None else round(top, 3)},
            "run_count": len(passes)}


def index_bytes(rows: list[dict]) -> dict | None:
    """``summary.json``'s ``claim_index_bytes``: the size of the claim's index (bytes, sampled each second as
    intervals.csv's ``claim_index_bytes``) at the first and last sample of the measured window and its
    largest: ``{"first", "last", "max"}``; None when never sampled (``INDEX=none``, or MariaDB)."""
    sizes = [r["claim_index_bytes"] for r in rows if r.get("claim_index_bytes") is not None]
    return {"first": sizes[0], "last": sizes[-1], "max": max(sizes)} if sizes else None


def monitor_notes(rows: list[dict], failures: int, costs_s: dict, in_flight_s: float) -> list[str]:
    """Plain-language notes on how often the monitor's table queries could be afforded, with their cost."""
    notes = []
    n = len(rows)
    for column, kind, what, budget in (("oldest_eligible_age_s", "age", "oldest eligible age", 5),
                                       ("queue_depth", "counts", "queue depth and running", 2)):
        taken = sum(1 for r in rows if r.get(column) is not None)
        spent = costs_s.get(kind) or []
        if n and taken < n:
            mean_ms = f"{1000 * sum(spent) / len(spent):,.1f} ms" if spent else "more than the run"
            notes.append(f"{what} sampled in {taken} of {n} seconds: one sample took {mean_ms} on this "
                         f"table under this load, and samples are spaced so they take at most {budget} % "
                         "of the time")
    if in_flight_s > 1.0:
        notes.append(f"a monitor table query had been running for {in_flight_s:,.1f} s when the load stopped")
    if failures:
        notes.append(f"{failures} monitor statements failed or hit their statement_timeout "
                     "(5 s for the statistics query, 30 s for a table query)")
    return notes


def final_lines(log, s: dict) -> None:
    """Log the lines a run ends with: the end block (:func:`bench.results.verdict.end_block`), a queue
    library's SQL-path caveat or own-worker line, RSS, SUSPECT."""
    if not s["measured_s"]:
        log("nothing was measured: the run stopped during the warm-up")
        return
    for line in end_block(s):
        log(line)
    if caveat := library_caveat_line(s):
        log(caveat)
    library = (s.get("queue_definition") or {}).get("library") or {}
    if library.get("mode") == "worker":
        workers = [p for p in s.get("processes") or [] if p.get("role") == "worker"]
        dispatch = s.get("dispatch_delay_us") or {}
        log(f"{library['package']} {library['version']}: its own worker, in {len(workers)} process"
            f"{'es' if len(workers) != 1 else ''} ({sum(1 for p in workers if p.get('lost'))} lost); "
            f"dispatch delay p50 {seconds.fmt_ms(dispatch.get('p50'))}, p99 {seconds.fmt_ms(dispatch.get('p99'))}"
            " (LIBRARY_MODE=sql sends its SQL from the tool's workers instead)")
    rss = s["harness_rss_mb"]
    at = ", ".join(f"{rss[f'at_{m}m']:,.1f} MB at {m} min" for m in RSS_REPORTED_MIN if rss[f"at_{m}m"] is not None)
    growth = "" if rss["growth_mb_per_min"] is None else f", {rss['growth_mb_per_min']:+,.2f} MB per minute"
    log(f"harness RSS {(at + ', ') if at else ''}{rss['end']:,.1f} MB at the end, peak {rss['max']:,.1f} MB{growth}")

