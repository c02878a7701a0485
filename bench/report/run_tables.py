"""The run report's tables, as rows of text for the template, from the run's ``summary.json`` (and
``run.json`` or its config); latencies arrive in µs and are shown in ms."""

from __future__ import annotations

from typing import Any

from bench.report.format import fmt_num, is_missing
from bench.report.round_trip_rows import round_trip_rows
from bench.report.run_format import NA, as_int, engine_capability, fmt_value
from bench.report.run_notes import workers_plan_label
from bench.results.failover_line import failover_line, loss_counts
from bench.results.partition_line import partition_line
from bench.results.model import machine_busy, utc_time
from bench.results.verdict import cost_line

__all__ = ["env_rows", "latency_rows", "plan_rows", "process_rows", "summary_rows"]

#: Latency-table keys that older result files lack (the row is left out then).
OPTIONAL_LATENCY_KEYS = ("work_duration_us", "loop_lag_us", "nowait_backoff_us")


def plan_rows(summary: dict) -> list[dict]:
    """Rows of the plan table (the workers' own claim plan, fresh custom and generic plans,
    pg_stat_statements), each ``{"what", "scan", "buffers" (shared buffers per call, PostgreSQL), "rows" (rows
    examined per call, MariaDB), "ms"}``, all text."""
    plans = summary.get("plans") or {}
    rows = []

    def row(what: str, plan: dict) -> dict:
        return {"what": what, "scan": plan.get("scan") or plan.get("error") or NA,
                "buffers": fmt_value(plan.get("shared_buffers")), "rows": fmt_num(plan.get("rows_examined")),
                "ms": fmt_num(plan.get("execution_ms"), 3)}

    workers = plans.get("workers")
    if workers is not None:
        rows.append(row("the workers' claim, read on their own sessions: "
                        + workers_plan_label(workers, summary.get("config") or {}), workers))
    for mode in ("custom", "generic"):
        if plans.get(mode):
            rows.append(row(f"what the {mode} plan would do (a fresh statement)", plans[mode]))
    if plans.get("explain"):
        rows.append(row("EXPLAIN FORMAT=JSON of the claim on the tool's own session (rows: the optimizer's estimate)",
                        plans["explain"]))
    pgss = summary.get("pg_stat_statements") or {}
    if pgss and engine_capability(summary, "statement_stats"):
        unavailable = pgss.get("unavailable")
        rows.append({"what": "pg_stat_statements, measured window",
                     "scan": f"not recorded: {unavailable}" if unavailable else f"{fmt_value(pgss.get('calls'))} calls",
                     "buffers": NA if unavailable else fmt_value(pgss.get("shared_blks_per_call")), "rows": NA,
                     "ms": NA if unavailable else fmt_num(pgss.get("mean_ms"), 3)})
    return rows


def _row(label: str, value: str, bad: bool = False) -> dict:
    return {"label": label, "value": value, "bad": bad}


def _ms_of_us(us: float | None) -> float | None:
    """µs as ms (None stays None)."""
    return None if is_missing(us) else float(us) / 1000


def _slash(values: dict, keys: tuple[str, ...], unit: str = "", us: bool = False) -> str:
    """``values``' ``keys`` as 'a / b / c unit', three decimals (``us``: µs shown in ms, a missing key 0)."""
    text = " / ".join(fmt_num(values.get(k, 0) / 1000 if us else values.get(k), 3) for k in keys)
    return f"{text} {unit}" if unit else text


def summary_rows(summary: dict, config: dict) -> list[dict]:
    """Rows of the headline-figures table: ``{"label", "value" (text with its unit), "bad" (shown red)}``;
    ``config`` gives the batch size and layout. Latencies are in :func:`latency_rows`."""
    return [*_count_rows(summary, config), *_open_loop_rows(summary), *_retry_rows(summary),
            *_migration_rows(summary), *_partition_rows(summary), *_failover_rows(summary),
            *_notify_rows(summary, config), *queue_rows(summary), *_invariant_rows(summary), *_effect_rows(summary),
            *_wait_rows(summary, config), *_cost_rows(summary, config), *round_trip_rows(summary)]


def _count_rows(summary: dict, config: dict) -> list[dict]:
    """Throughput, claims, the window, the counts, rows per claim against the batch, oldest age, errors."""
    batch = as_int(config.get("batch"))
    max_rows = as_int(summary.get("max_rows_per_claim"))
    over_batch = max_rows is not None and batch is not None and max_rows > batch
    age = summary.get("oldest_eligible_age_s") or {}
    return [
        _row("throughput", fmt_num(summary.get("throughput_jobs_per_s"), 1, "jobs/s")),
        _row("claims per second", fmt_num(summary.get("claims_per_s"), 1, "claims/s")),
        *([_row("cost per job (the server's counters)", cost)] if (cost := cost_line(summary)) else []),
        _row("measured window", fmt_num(summary.get("measured_s"), 1, "s")),
        _row("jobs claimed", fmt_num(summary.get("jobs_claimed"))),
        _row("jobs completed", fmt_num(summary.get("jobs_completed"))),
        _row("empty claims", fmt_num(summary.get("empty_claims"))),
        *([_row("empty claims while rows were pending (FR-07)", fmt_num(summary["empty_claims_while_work_waited"]),
                bad=summary["empty_claims_while_work_waited"] > 0)]
          if summary.get("empty_claims_while_work_waited") is not None else []),
        _row("max rows per claim",
             f"{fmt_num(max_rows)} (batch {fmt_num(batch)})", bad=over_batch),
        _row("oldest eligible age max / p95 / last sample", _slash(age, ("max", "p95", "final"), "s")),
        _row("errors", _fmt_errors(summary.get("errors"))),
    ]


def _open_loop_rows(summary: dict) -> list[dict]:
    """Offered load, jobs produced, producer lag and the keep-up verdict; none for a closed-loop run."""
    if not summary.get("offered_rate_jobs_per_s"):
        return []
    lag = summary.get("producer_lag_ms") or {}
    return [_row("offered load (open-loop producers)", fmt_num(summary["offered_rate_jobs_per_s"], 1, "jobs/s")),
            _row("jobs produced", fmt_num(summary.get("jobs_produced"))),
            _row("producer schedule lag p50 / p99 / max", _slash(lag, ("p50", "p99", "max"), "ms")),
            _row("does the queue keep up?", str(summary.get("saturation_verdict")),
                 bad=bool(summary.get("saturated")))]


def _retry_rows(summary: dict) -> list[dict]:
    """Retry, lease and fault figures (measured window), those the run has."""
    return [_row(label, fmt_num(summary.get(key)))
            for key, label in (("nowait_retries", "NOWAIT retries (after back-off)"),
                               ("retries", "failed attempts re-queued with back-off"),
                               ("dead_lettered", "jobs dead-lettered"),
                               ("lease_expiries", "lease expiries (reaper)"),
                               ("stale_completions", "stale completions rejected by the token"),
                               ("redeliveries", "redeliveries (claims beyond a job's first)"),
                               ("crashed_claims", "claims abandoned by crashed workers (fault)"),
                               ("late_completions", "late completions (fault)"),
                               ("backend_kills", "backends killed (fault)"))
            if key in summary]


def _partition_rows(summary: dict) -> list[dict]:
    """Each partition window in a row (:func:`bench.results.partition_line.partition_line`), bad when a worker
    noticed late or never, or the audit after the heal was not clean."""
    return [_row(f"partition {fmt_num(p['start_s'])}–{fmt_num(p['end_s'])} s: workers noticed, errors, "
                 "reconnections, leases, audit", partition_line(p).split(": ", 1)[1],
                 bad=bool(p["late"]) or not p["audit_clean"])
            for p in summary.get("partitions") or []]


def _failover_rows(summary: dict) -> list[dict]:
    """The failover in a row (:func:`bench.results.failover_line.failover_line`), bad when it did not recover
    within the window or acknowledged work was lost."""
    f = summary.get("failover")
    if not f:
        return []
    lost = bool(loss_counts(f.get("losses") or {}))
    unrecovered = (f.get("recovery") or {}).get("recovered_at_s") is None
    what = ("observed: the old primary's last answer, the new one's first" if f.get("caused") is False
            else "kill, promotion")
    return [_row(f"failover: {what}, claims resumed, recovery, losses", failover_line(f).split(": ", 1)[1],
                 bad=bool(f.get("error")) or lost or unrecovered)]


def _migration_rows(summary: dict) -> list[dict]:
    """Each migration window: its attempts and outcome; the stall, the claims it delayed, seconds without a claim
    (the rule: docs/migrations.md, "The stall")."""
    rows = []
    for m in summary.get("migrations") or []:
        outcome = (f"done at {fmt_num(m['done_s'], 3)} s" if m["succeeded"] else
                   "still waiting at the end (cancelled)" if m["unfinished_at_end"] else f"not done: {m['error']}")
        rows.append(_row(f"migration {m['ddl']} ({m['timeout_set']}): attempts, lock timeouts, outcome",
                         f"{m['attempts']}, {m['lock_timeouts']}, {outcome}", bad=not m["succeeded"]))
        if m.get("workers_not_measured"):  # behind a pooler: lock waiters are not attributed to workers
            rows.append(_row("migration stall and claims seen delayed; seconds without a claim",
                             f"{m['workers_not_measured']}; {m['claimless_s']}"))
            continue
        rows.append(_row("migration stall total / longest (s), claims seen delayed, seconds without a claim",
                         f"{fmt_num(m['stall_s'], 1)} / {fmt_num(m['longest_stall_s'], 1)}, "
                         f"{fmt_num(m['delayed_claims'])}, {m['claimless_s']}", bad=bool(m["longest_stall_s"])))
    return rows


def _notify_rows(summary: dict, config: dict) -> list[dict]:
    """Notification wake-ups and the notify lock's waiters (``WAKEUP=notify`` only)."""
    if config.get("wakeup") != "notify":
        return []
    rows = []
    waiters = summary.get("notify_lock_waiters") or {}
    if summary.get("notify_wakeups") is not None:  # None: a library's own worker (its wake-ups are its own)
        rows.append(_row("idle waits ended by a notification (WAKEUP=notify)", fmt_num(summary.get("notify_wakeups"))))
    rows.append(_row("commits waiting on the notify lock max / mean (Lock:object)",
                     f"{fmt_num(waiters.get('max'))} / {fmt_num(waiters.get('mean'), 2)} sessions"))
    return rows


def _invariant_rows(summary: dict) -> list[dict]:
    """The audit's invariants (red unless 0), in its order, then those a queue definition could not check."""
    invariants = summary.get("invariants") or {}
    rows = [_row(f"invariant: {key}", fmt_num(v), bad=is_missing(v) or v != 0)
            for key, v in invariants.items()]  # in the audit's order (summary.json keeps it)
    rows.extend(_row(f"invariant: {key}", f"not checked: {why}", bad=True)
                for key, why in (summary.get("uncheckable_invariants") or {}).items())
    return rows


def _effect_rows(summary: dict) -> list[dict]:
    """``EFFECTS``' audit (docs/effects.md): one row a count; none without effects."""
    effects = summary.get("effects")
    if not effects:
        return []
    exact = effects["mode"] != "outside"  # same_txn and idempotent promise one effect a job
    return [_row(f"effects ({effects['mode']}): {label}", fmt_num(effects[key]), bad=bad)
            for key, label, bad in (
                ("written", "effect rows written", False),
                ("duplicate_jobs", "jobs with more than one effect", exact and effects["duplicate_jobs"] > 0),
                ("extra_effects", "effect rows beyond one a job", exact and effects["extra_effects"] > 0),
                ("missing_effects", "jobs completed with no effect", effects["missing_effects"] > 0),
                ("stale_attempt_effects", "effects from a stale attempt (not the completing token)",
                 effects["mode"] == "same_txn" and (effects["stale_attempt_effects"] or 0) > 0),
                ("duplicates_per_1000_redeliveries", "duplicated jobs per 1,000 redeliveries", False))]


def _wait_rows(summary: dict, config: dict) -> list[dict]:
    """The per-job wait inside a batch (batch > 1) and a library worker's dispatch delay, in ms."""
    batched = (as_int(config.get("batch")) or 1) > 1
    return [_row(label, _slash(summary[key], ("p50", "p99"), "ms", us=True))
            for key, label, shown in (
                ("batch_wait_us", "per-job wait inside a batch p50 / p99 (claimed, not started)", batched),
                # a queue library's own worker:
                ("dispatch_delay_us", "dispatch delay p50 / p99 (the library's fetch returned, its task not started)",
                 True))
            if shown and (summary.get(key) or {}).get("p50") is not None]


def _cost_rows(summary: dict, config: dict) -> list[dict]:
    """Archived jobs (archive layout), table sizes before / after, harness CPU, the machine's CPU outside the run
    and the monitor's cost."""
    rows = []
    if config.get("layout") == "archive":
        rows.append(_row("jobs moved to the archive (mover)", fmt_num(summary.get("archived_jobs"))))
    sizes = summary.get("table_sizes") or {}
    if sizes.get("before") and sizes.get("after"):
        def mb(part: dict) -> str:
            return ", ".join(f"{what} {fmt_num(part[f'{what}_bytes'] / 1e6, 1, 'MB')}"
                             for what in ("table", "indexes", "archive") if what != "archive" or part.get("archive_bytes"))
        rows.append(_row("sizes before / after the run", f"{mb(sizes['before'])} / {mb(sizes['after'])}"))
    cpu = summary.get("harness_cpu_max_pct")
    limit = summary.get("harness_cpu_limit_pct")  # the run's own suspect limit (bench/run_summary/)
    mon = summary.get("monitor_query_us") or {}
    rows.append(_row("harness CPU max", fmt_num(cpu, 1, "%"),
                     bad=not is_missing(cpu) and limit is not None and float(cpu) > limit))
    outside, steal = summary.get("outside_cpu_pct") or {}, summary.get("steal_pct") or {}
    kernel = summary.get("kernel_cpu_pct") or {}  # {}: a run written before the kernel's work was kept apart
    if outside.get("mean") is not None:  # None: a run written before it was measured
        rows.append(_row("machine CPU outside the run mean / max, steal mean (% of all cores)",
                         f"{fmt_num(outside['mean'], 1, '%')} / {fmt_num(outside['max'], 1, '%')}, "
                         f"{fmt_num(steal.get('mean'), 1, '%')}", bad=machine_busy(summary) is not None))
    if kernel.get("mean") is not None:
        rows.append(_row("the kernel's work (interrupts, kernel threads) mean / max, not judged (% of all cores)",
                         f"{fmt_num(kernel['mean'], 1, '%')} / {fmt_num(kernel['max'], 1, '%')}"))
    waits = (summary.get("wait_events") or {}).get("query_us_per_s")  # None: not sampled
    rows.append(_row("the monitor's queries' time per second, mean / max (ms per s)",
                     f"{fmt_num(_ms_of_us(mon.get('mean')), 1)} / {fmt_num(_ms_of_us(mon.get('max')), 1)}"
                     + ("" if waits is None else f" (of which the wait events' samples {fmt_num(_ms_of_us(waits), 2)} mean)")))
    cost = summary.get("measurement_cost")  # None: a run written before it was kept
    if cost:
        rows.append(_row(f"measurement cost: the tool's process ({cost['tool_process_does']}), mean; the monitor's "
                         "server backends, mean",
                         f"{fmt_num(cost['tool_process_cpu_pct'], 1, '%')} of a core; "
                         f"{fmt_num(cost['monitor_server_cpu_pct'], 2, '%')} of a core"))
    seen = summary.get("workers_connected")  # None: a run written before it was kept
    if seen:
        rows.append(_row("workers connected at start / at end, of WORKERS (connect wait)",
                         f"{seen['at_start']} / {seen['at_end']} of {seen['asked']} ({fmt_num(seen['connect_wait_s'], 1, 's')})",
                         bad=min(seen["at_start"], seen["at_end"]) < seen["asked"]))
    return rows


def queue_rows(summary: dict) -> list[dict]:
    """Rows on queues and tenants (``NAMED_QUEUES``/``TENANTS`` > 1; none otherwise): jobs completed
    per queue in the window (count, min, max), Jain's index of them, and with tenants the flooder's
    oldest eligible age against the largest of the others'."""
    per_queue = summary.get("jobs_completed_per_queue")
    if not per_queue:
        return []
    if "queues" in per_queue:  # the compact form
        n, low, high = per_queue["queues"], per_queue["min"], per_queue["max"]
    else:
        n, low, high = len(per_queue), min(per_queue.values()), max(per_queue.values())
    rows = [_row(f"jobs completed per queue min / max ({fmt_num(n)} queues)", f"{fmt_num(low)} / {fmt_num(high)}"),
            _row("fairness: Jain's index of per-queue throughput (1 = equal)", fmt_num(summary.get("fairness_jain"), 3))]
    ages = summary.get("tenant_oldest_eligible_age_s")
    if ages:
        rows.append(_row("oldest eligible age mean / max: flooder (q0) | others (largest)",
                         " | ".join(_slash(ages.get(who) or {}, ("mean", "max")) for who in ("flooder", "others")) + " s"))
    return rows


def _fmt_errors(errors: Any) -> str:
    """'55P03: 3, 40001: 1' for non-zero counts, largest first; 'none' when there are none."""
    if not errors:
        return "none"
    counts = [(k, v) for k, v in errors.items() if not is_missing(v) and v != 0]
    counts.sort(key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{k}: {fmt_num(v)}" for k, v in counts) or "none"


def latency_rows(summary: dict) -> list[dict]:
    """Rows of the latency table: ``{"label", "cells"}``, cells the p50/p95/p99/max/mean text (see
    :func:`_ms`; a ``*_us`` key in µs)."""
    rows = []
    for label, key in (("claim latency", "claim_latency_us"), ("completion latency", "complete_latency_us"),
                       ("pickup latency", "pickup_latency_ms"),
                       (f"job work, measured (configured mean {fmt_num(summary.get('work_expected_ms'), 3, 'ms')})",
                        "work_duration_us"),
                       ("event-loop lag (10 ms timer, how late)", "loop_lag_us"), ("NOWAIT back-off sleeps", "nowait_backoff_us")):
        d = summary.get(key)
        if (d is None and key in OPTIONAL_LATENCY_KEYS) or (key == "nowait_backoff_us" and (d or {}).get("p50") is None):
            continue  # runs recorded before the key existed; no 55P03, no back-off
        rows.append({"label": label, "cells": [(_us if key.endswith("_us") else _ms)((d or {}).get(s))
                                               for s in ("p50", "p95", "p99", "max", "mean")]})
    return rows


def _ms(ms: Any) -> str:
    """A duration in ms as the latency table shows it: '412.000 ms', or '19.02 s' from 10 s up."""
    if is_missing(ms):
        return NA
    return fmt_num(float(ms) / 1000.0, 2, "s") if float(ms) >= 10_000 else fmt_num(ms, 3, "ms")


def _us(us: Any) -> str:
    return NA if is_missing(us) else _ms(float(us) / 1000.0)


def env_rows(run: dict, summary: dict) -> list[tuple[str, str]]:
    """(label, value) rows of the environment table: server, client machine, seed, timestamps, versions."""
    client = run.get("client") or {}
    seed = run.get("seed") or {}
    mem = client.get("memory_bytes")
    return [
        ("engine", fmt_value(run.get("engine"))),
        ("server version", fmt_value(run.get("server_version"))),
        ("DSN (password masked)", fmt_value(run.get("dsn_masked"))),
        ("embedded database", fmt_value(run.get("embedded_database"))),
        ("client cores", fmt_value(client.get("cores"))),
        ("client memory", NA if is_missing(mem) else fmt_num(mem / 2**30, 1, "GiB")),
        ("client python", fmt_value(client.get("python"))),
        ("client platform", fmt_value(client.get("platform"))),
        ("client hostname", fmt_value(client.get("hostname"))),
        ("backlog chosen by", fmt_value(run.get("backlog_computed"))),
        ("seed rows", fmt_num(seed.get("rows"))),
        ("seed time", fmt_num(seed.get("seconds"), 2, "s")),
        ("seed rate", fmt_num(seed.get("rows_per_s"), 0, "rows/s")),
        ("run started", fmt_value(run.get("started_at"))),
        ("measured window start",
         fmt_value(run.get("measured_start") or summary.get("measured_start"))),
        ("measured window end",
         fmt_value(run.get("measured_end") or summary.get("measured_end"))),
        ("run ended", fmt_value(run.get("ended_at"))),
        ("tool version", fmt_value(run.get("tool_version"))),
        ("git sha", fmt_value(run.get("git_sha")) if run.get("git_sha") else "unknown"),
    ]


def process_rows(summary: dict) -> list[dict]:
    """Rows of the load generator processes table (several processes, or one lost): ``{"process", "host", "pid",
    "workers", "jobs_completed", "claims", "errors", "cpu" (max %), "loop_lag" (p99 ms), "state", "bad"}``;
    bad when lost or past the run's suspect limits."""
    procs = summary.get("processes") or []
    if len(procs) < 2 and not any(p.get("lost") for p in procs):
        return []
    cpu_limit, lag_limit = summary.get("harness_cpu_limit_pct"), summary.get("loop_lag_limit_us")
    rows = []
    for p in procs:
        counters = p.get("counters") or {}
        lag = p.get("loop_lag_p99_us")
        saturated = ((cpu_limit is not None and (p.get("cpu_max_pct") or 0) > cpu_limit)
                     or (lag_limit is not None and lag is not None and lag > lag_limit))
        missed, left = p.get("missing_seconds") or [], p.get("left_running") or {}
        said = ([f"missed {len(missed)} second{'s' if len(missed) != 1 else ''}"] if missed else []) + (
            [f"left {left['jobs']:,} job{'s' if left['jobs'] != 1 else ''} running" + (f", leases until {utc_time(left['leases_expire_unix'])}"
                                                      if left.get("leases_expire_unix") else "")]
            if left.get("jobs") else [])
        state = ("lost" + (f" ({'; '.join(said)})" if said else "") if p.get("lost")
                 else "saturated" if saturated else "ok")
        rows.append({"process": p.get("process"), "host": fmt_value(p.get("host")), "pid": fmt_value(p.get("pid")), "workers": fmt_value(p.get("workers")),
                     "jobs_completed": fmt_num(counters.get("jobs_completed")), "claims": fmt_num(counters.get("claims")),
                     "errors": fmt_num(counters.get("errors")), "cpu": fmt_num(p.get("cpu_max_pct"), 1),
                     "loop_lag": fmt_num(None if lag is None else lag / 1000, 2), "state": state,
                     "bad": bool(p.get("lost") or saturated)})
    return rows
