"""``summary.json`` of one run, block by block: each function below computes the keys of one part
(throughput and latencies, the audit, trust, counters, open-loop producers, the monitor, faults,
plans and vacuum, processes, fairness), in the order the file holds them."""

from __future__ import annotations

from bench.analysis import fairness
from bench.analysis.claim_growth import claim_growth
from bench.analysis.empty_claims import empty_while_work_waited
from bench.analysis.queue_verdict import saturation
from bench.config.faults import OPTIONS as FAULT_OPTIONS
from bench.measure import metrics
from bench.results import slo
from bench.run_summary.cost import cost_per_job
from bench.run_summary.facts import Figures, RunFacts
from bench.run_summary.measurement_cost import measurement_cost
from bench.run_summary.migration import migrations
from bench.run_summary.partition import partitions
from bench.run_summary.pooler import pooler_figures
from bench.run_summary.relay import relay_figures
from bench.run_summary.failover import failover_figures
from bench.run_summary.replica import replica_figures
from bench.run_summary.round_trips import round_trip_figures
from bench.run_summary.rows import column, index_bytes, monitor_notes, percentile, worker_changes
from bench.run_summary.wait_events import wait_event_figures
from bench.run_summary.suspect import (SUSPECT_CPU_PCT, SUSPECT_LOOP_LAG_P99_US, SUSPECT_OUTSIDE_CPU_PCT,
                                      suspect_reasons)
from bench.workload import jobs

#: Counters of the measured window written as they are, under their own names (fault and crash counts).
FAULT_COUNTERS = ("crashed_claims", "crashed_jobs", "rolled_back_claims", "in_doubt_claims", "late_completions",
                  "backend_kills", "process_kills", "reconnects")


def summarize(facts: RunFacts) -> dict:
    """Build ``summary.json`` (its keys: docs/results.md) from what the run measured and audited."""
    f = Figures(facts)
    summary = {**_throughput(f), **_audit(f), **_trust(f), **_counters(f), **_open_loop(f), **_wakeups(f),
               **_monitor(f), **_faults(f), **_fault_counters(f), **_latencies(f), **_plans_and_vacuum(f),
               **fairness.per_queue_figures(facts.audit.get("completed_per_queue")),
               "tenant_oldest_eligible_age_s": fairness.tenant_ages(facts.rows, facts.cfg.tenants),
               "cost_per_job": cost_per_job(facts.rows, f.counters["jobs_completed"], facts.run_info),
               "replica": replica_figures(facts.rows, facts.run_info),
               "pooler": pooler_figures(facts.rows, facts.run_info, SUSPECT_CPU_PCT),
               "relay": relay_figures(facts.rows, facts.run_info, SUSPECT_CPU_PCT),
               "wait_events": wait_event_figures(facts.rows, facts.run_info),
               **round_trip_figures(f)}
    summary["slo"] = slo.judge(facts.cfg.slo, summary)  # last: it reads the trust rule over the whole summary
    return summary


def _throughput(f: Figures) -> dict:
    """The window, throughput, claims, the claim/complete/pickup latencies, the oldest eligible age, errors."""
    facts, counters = f.facts, f.counters
    ages = column(facts.rows, "oldest_eligible_age_s")
    return {
        "run_id": facts.run_id,
        "complete": facts.complete,
        "config": facts.cfg.public(),
        "measured_s": round(f.measured_s, 3),
        "measured_start": facts.run_info["measured_start"],
        "measured_end": facts.run_info["measured_end"],
        "throughput_jobs_per_s": f.per_s("jobs_completed"),
        "claims_per_s": f.per_s("claims"),
        "claims": counters["claims"],
        "completions": f.complete_h.get_total_count(),
        "jobs_claimed": counters["jobs_claimed"],
        "jobs_completed": counters["jobs_completed"],
        "empty_claims": counters["empty_claims"],
        "max_rows_per_claim": facts.max_rows_per_claim,
        "claim_latency_us": metrics.latency_summary(f.claim),
        "complete_latency_us": metrics.latency_summary(f.complete_h),
        "pickup_latency_ms": metrics.latency_summary(metrics.merge(facts.measured, "pickup_latency_us"), scale=1000.0),
        "oldest_eligible_age_s": {
            "max": max(ages) if ages else None,
            "p95": percentile(ages, 95),
            "final": ages[-1] if ages else None,  # the last sample inside the window: up to a sampling interval before its end
        },
        "errors": dict(f.errors),
    }


def _audit(f: Figures) -> dict:
    """The invariants, what a queue definition's audit could not check (never reported as 0), the effects'."""
    audit = f.facts.audit
    return {"invariants": audit["invariants"],
            "uncheckable_invariants": audit.get("uncheckable") or {},
            "queue_definition": f.facts.run_info.get("queue_definition"),
            "audit_notes": audit.get("notes") or [],
            "effects": audit.get("effects")}  # EFFECTS' audit (bench.engines.audit_flow.effect_counts), None: none


def _trust(f: Figures) -> dict:
    """The harness's CPU, the workers connected (run.json's), the machine's CPU outside the run and its limit,
    whether the run is suspect and why, whether the backlog ran dry."""
    reasons = suspect_reasons(f)
    return {"harness_cpu_max_pct": f.cpu_max,
            "workers_connected": f.facts.run_info.get("workers_connected"),
            "harness_cpu_limit_pct": SUSPECT_CPU_PCT,
            **f.busy, "outside_cpu_limit_pct": SUSPECT_OUTSIDE_CPU_PCT,
            "suspect": bool(reasons),
            "suspect_reasons": reasons,
            "backlog_exhausted": bool(f.backlog_exhausted)}


def _counters(f: Figures) -> dict:
    """Stale completions, retries, dead letters, lease expiries, redeliveries, FIFO order."""
    counters, audit = f.counters, f.facts.audit
    return {"stale_completions": counters["stale_completions"],
            "retries": counters["retries"],
            "dead_lettered": counters["dead_lettered"] + counters["reaper_dead_lettered"],
            "lease_expiries": counters["lease_expiries"],
            "redeliveries": audit["redeliveries"],
            "fifo_out_of_order_share": audit.get("fifo_out_of_order_share")}


def _open_loop(f: Figures) -> dict:
    """The offered rate, jobs produced, the producers' schedule lag, and whether the queue kept up."""
    cfg = f.facts.cfg
    return {"offered_rate_jobs_per_s": cfg.rate or None,
            "jobs_produced": f.counters["jobs_produced"],
            "producer_lag_ms": metrics.latency_summary(f.producer_lag, scale=1000.0),
            **saturation(cfg.rate, f.facts.rows, f.counters, f.measured_s)}


def _wakeups(f: Figures) -> dict:
    """NOWAIT retries; FR-10: idle waits ended by a producer's notification (WAKEUP=notify), and the
    sessions the monitor saw waiting on the notify lock at commit (Lock:object) in its samples."""
    waiters = column(f.facts.rows, "notify_lock_waiters")
    return {"nowait_retries": f.counters["nowait_retries"],
            # the tool's own workers' count; a library's own worker wakes by itself, uncounted (None)
            "notify_wakeups": None if f.facts.cfg.library_mode == "worker" else f.counters["notify_wakeups"],
            "notify_lock_waiters": {"max": max(waiters) if waiters else None,
                                    "mean": round(sum(waiters) / len(waiters), 3) if waiters else None}}


def _monitor(f: Figures) -> dict:
    """The monitor's own cost, failures and notes; whether the database went away."""
    facts = f.facts
    info, costs = facts.run_info, column(facts.rows, "monitor_query_us")
    return {"monitor_query_us": {"mean": round(sum(costs) / len(costs), 1) if costs else None,
                                 "max": max(costs) if costs else None},
            "monitor_failures": facts.monitor_failures,
            "monitor_notes": monitor_notes(facts.rows, facts.monitor_failures, info["monitor_table_cost_s"],
                                           info["monitor_table_query_in_flight_s"], info.get("monitor_lock_skips"),
                                           table_queries=getattr(facts.cfg, "monitor", "full") == "full"),
            "database_lost": info.get("database_lost"),
            "measurement_cost": measurement_cost(facts.rows, info.get("process_cpu_mean_pct"))}


def _faults(f: Figures) -> dict:
    """The fault windows, the configuration's notes, changes of the worker count, the web UI."""
    cfg = f.facts.cfg
    return {"faults": [{k: v for k, v in fault.__dict__.items()
                        if k in ("kind", "start_s", "end_s") or k in FAULT_OPTIONS[fault.kind]} for fault in cfg.faults],
            "config_notes": list(cfg.notes),
            "worker_changes": worker_changes(f.facts.rows),
            "web_ui": f.facts.run_info.get("web_ui")}


def _fault_counters(f: Figures) -> dict:
    """What the faults did, the rows by status at the end, and empty claims while work waited (FR-07)."""
    facts, status_counts = f.facts, f.facts.audit["status_counts"]
    return {**{name: f.counters[name] for name in FAULT_COUNTERS},
            "stalled_jobs_retried": f.counters["stalled_retried"],  # procrastinate's own retry of stalled jobs
            "status_counts": status_counts,
            "migrations": migrations(facts.run_info, facts.rows),
            "partitions": partitions(facts.run_info, facts.audit["invariants"]),
            "failover": failover_figures(facts.run_info, facts.rows, facts.audit.get("failover_losses")),
            "empty_claims_while_work_waited": empty_while_work_waited(
                facts.cfg.public(), [r.get("jobs_claimed") for r in facts.rows],
                [r.get("empty_claims") for r in facts.rows],
                status_counts.get("pending", 0) if status_counts else None)[0]}


def _latencies(f: Figures) -> dict:
    """The other histograms (batch wait, dispatch delay, work, event-loop lag, NOWAIT back-off), the
    monitor's errors by kind, jobs archived."""
    measured = f.facts.measured
    return {"batch_wait_us": metrics.latency_summary(metrics.merge(measured, "batch_wait_us")),
            "dispatch_delay_us": metrics.latency_summary(metrics.merge(measured, "dispatch_delay_us")),
            "work_duration_us": metrics.latency_summary(f.work_h),
            "work_expected_ms": round(jobs.expected_work_s(f.facts.cfg) * 1000.0, 3),
            "loop_lag_us": metrics.latency_summary(f.loop_lag),
            "loop_lag_limit_us": SUSPECT_LOOP_LAG_P99_US,
            "nowait_backoff_us": metrics.latency_summary(metrics.merge(measured, "nowait_backoff_us")),
            "monitor_errors": f.facts.run_info.get("monitor_errors", {}),
            "archived_jobs": f.counters["archived_jobs"]}


def _plans_and_vacuum(f: Figures) -> dict:
    """The claim's plans and growth, vacuum, the index and table sizes, the audit's details, RSS, processes."""
    facts, info = f.facts, f.facts.run_info
    growth = claim_growth(facts.rows)
    return {"plans": info["claim_plans"],
            "claim_growth": growth,
            "plan_warnings": facts.plan_warnings(info["claim_plans"]["workers"], growth),
            "autovacuum": info["autovacuum"],
            "vacuum_passes": info.get("vacuum_passes"),
            "claim_index_bytes": index_bytes(facts.rows),
            "pg_stat_statements": info["pg_stat_statements"],
            "table_sizes": {"before": info["sizes_before"], "after": info["sizes_after"]},
            "audit": facts.audit["details"],
            "harness_rss_mb": info["harness_rss_mb"],
            "processes": info.get("processes")}
