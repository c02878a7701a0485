"""Whether a run can be trusted: ``summary.json``'s ``suspect_reasons``, each a plain sentence on
what may have set the pace or gone unmeasured, with the limits they are judged by."""

from __future__ import annotations

from collections import Counter

from bench.config.run_config import RunConfig
from bench.measure import metrics, seconds
from bench.results.model import machine_busy, process_name
from bench.run_summary.facts import Figures
from bench.run_summary.failover import without_primary
from bench.run_summary.relay import relay_reasons

#: Above this harness CPU (% of one core) the load generator may be the bottleneck.
SUSPECT_CPU_PCT = 90.0


#: Above this event-loop lag p99 (µs) over the measured window the load generator is saturated
#: and the run suspect. It is the probe's own period: a p99 above it means that in 1 % of ticks
#: the loop woke more than a whole period late (a 10 ms timer firing after 20 ms), so the process
#: is not keeping its own schedule. Every latency it measures ends when its greenlet runs again,
#: and each worker cycle waits for at least three wake-ups (claim reply, the work's timer,
#: completion reply): a lag of this size adds tens of ms to cycles that at the calibration
#: load (50 clients; docs/measurements/calibration.md, "Before and after the second redesign": pgbench
#: 3,346.2 tps at f4340db) last about 15 ms, so the generator, not the database, sets the pace. A starved
#: generator reads low on CPU (it waits for a core), so the CPU rule alone misses it. Measured figures
#: behind the choice: docs/measurements/generator.md, "Event-loop lag of a healthy and a starved generator".
SUSPECT_LOOP_LAG_P99_US = 10_000

#: Above this producer schedule lag p50 (ms) over the measured window, the open-loop producers ran
#: more than a second behind their schedule for most of their inserts: the queue was not offered
#: ``RATE`` (pgbench ``--rate`` reports the same schedule lag as the sign that the offered rate was
#: not sustained: https://www.postgresql.org/docs/current/pgbench.html, "--rate"), so the run
#: cannot answer what that rate does. Latencies stay honest: they are measured from the schedule.
SUSPECT_PRODUCER_LAG_P50_MS = 1000.0


#: Above this share of claims that failed with an error (the policy's own NOWAIT refusals, retried by design,
#: left out), the latency figures leave out more than their own tail: a failed claim is not in the claim
#: histogram, so with more than 1 % of claims failed, claim p99 describes fewer than 99 % of the attempts and
#: can be anything. Decided from the claim p99 the run reports, before any run was judged by it.
SUSPECT_ERROR_SHARE = 0.01

#: Above this share of the machine's CPU (% of all its cores, the mean over the measured window) spent outside the
#: run's own processes, steal time included, another program took enough of the cores to move the run's figures
#: by more than 10 % (the plan's resolution). Measured (docs/measurements/harness.md, "A busy machine"): on a
#: 2-core machine a closed-loop run beside CPU hogs and other programs moved past that at 7.5 % outside and above
#: (claim p99 +28 % beside a hog bursting 10 ms of every 100 ms; throughput past -10 % from 22.6 %), and held at
#: the quietest runs' 3.1-3.3 %; the limit sits between.
SUSPECT_OUTSIDE_CPU_PCT = 5.0


def suspect_reasons(f: Figures) -> list[str]:
    """Every reason the run of ``f`` may not be trusted, in a fixed order; none for a sound run."""
    return [*_harness_reasons(f), *_workers_reasons(f), *_cycle_reasons(f), *_producer_reasons(f),
            *_database_lost_reasons(f), *_process_pace_reasons(f), *_claim_log_reasons(f),
            *_lost_process_reasons(f), *_outcome_reasons(f), *_machine_reasons(f), *_pooler_reasons(f),
            *relay_reasons(f.facts.rows, SUSPECT_CPU_PCT)]


def _pooler_reasons(f: Figures) -> list[str]:
    """The pooler's process past the load generator's CPU limit (:data:`SUSPECT_CPU_PCT`: PgBouncer is
    single-threaded, so one core is all it has), and a pool mode the console or detection contradicts."""
    info, reasons = f.facts.run_info.get("pooler") or {}, []
    cpu = [r["pooler_cpu_pct"] for r in f.facts.rows if r.get("pooler_cpu_pct") is not None]
    if cpu and max(cpu) > SUSPECT_CPU_PCT:
        reasons.append(f"the pooler's process reached {max(cpu):.0f} % of a core (> {SUSPECT_CPU_PCT:.0f} %): "
                       "PgBouncer runs on one core, so the pooler may set the pace, not the database")
    reasons += [f"the pool mode given is not the pooler's: {text}" for text in info.get("mode_disagrees") or []
                if not text.startswith("pooling not detected")]
    return reasons


def _machine_reasons(f: Figures) -> list[str]:
    """A machine busy outside the run past :data:`SUSPECT_OUTSIDE_CPU_PCT` (the rule: :func:`machine_busy`)."""
    why = machine_busy({**f.busy, "outside_cpu_limit_pct": SUSPECT_OUTSIDE_CPU_PCT})
    if why is None:
        return []
    return [f"{why}, {f.busy['outside_cpu_pct']['max']:g} % at most in a second: another program shared the "
            f"cores with the run and may have set its pace{busiest_others(f.facts.run_info)}; run it on a quieter machine"]


def busiest_others(info: dict) -> str:
    """The busiest processes outside the run, as a clause (run.json ``outside_processes``; "" when none was)."""
    named = [f"{p['command']} (pid {p['pid']}, {p['cpu_pct']:g} % of a core)"
             for p in info.get("outside_processes") or [] if p["cpu_pct"] >= 1.0]
    return f" (the busiest: {'; '.join(named)})" if named else ""


def _workers_reasons(f: Figures) -> list[str]:
    """Fewer workers connected than asked as the clock started or as the load stopped (the web UI's own changes
    aside), and a share of failed claims above :data:`SUSPECT_ERROR_SHARE`."""
    reasons, seen = [], f.facts.run_info.get("workers_connected") or {}
    asked = seen.get("asked")
    if asked is not None and seen.get("at_start") is not None and seen["at_start"] < asked:
        reasons.append(f"the run started with {seen['at_start']} of {asked} workers connected (waited "
                       f"{seen.get('connect_wait_s', 0):g} s): its figures are those of fewer workers")
    if (asked is not None and seen.get("at_end") is not None and seen["at_end"] < asked
            and not f.facts.run_info.get("web_ui")):
        in_lost = sum(p.get("workers") or 0 for p in f.facts.run_info.get("processes") or [] if p.get("lost"))
        why = ("the missing ones were in load generator processes that were lost" if in_lost >= asked - seen["at_end"]
               else "the others had lost their sessions and could not open new ones")
        reasons.append(f"the run ended with {seen['at_end']} of {asked} workers connected: {why}")
    failed = sum(f.errors.values()) - f.counters["nowait_retries"]
    attempts = f.counters["claims"] + failed
    if attempts and failed / attempts > SUSPECT_ERROR_SHARE and not f.facts.cfg.faults:
        kinds = ", ".join(f"{kind} {n:,}" for kind, n in f.errors.most_common(3))
        reasons.append(f"{failed:,} errors of claims and completions against {f.counters['claims']:,} claims "
                       f"that succeeded ({kinds}): {failed / attempts:.1%} of attempts failed (> "
                       f"{SUSPECT_ERROR_SHARE:.0%}), and the latency figures describe only those that succeeded")
    return reasons


def _harness_reasons(f: Figures) -> list[str]:
    """The load generator's CPU, the monitor's missed samples, the event loop's lag."""
    reasons = []
    if f.cpu_max > SUSPECT_CPU_PCT:
        reasons.append(f"load generator CPU reached {f.cpu_max:.0f} % of a core (> {SUSPECT_CPU_PCT:.0f} %): "
                       "the harness may be the bottleneck")
    # The last row of an interrupted run is a partial second the monitor never reached.
    whole = f.facts.rows if f.facts.complete else f.facts.rows[:-1]
    missed = [r for r in whole if r.get("lock_waiters") is None]
    counted = [r for r in missed if not without_primary(f.facts.run_info, r["t_s"])]
    if counted:
        reasons.append(f"the monitor missed {len(counted)} of {len(whole)} samples"
                       + (f" (and {len(missed) - len(counted)} with no primary)" if len(missed) > len(counted) else ""))
    if f.loop_lag.get_total_count() and seconds.p99_of(f.loop_lag) > SUSPECT_LOOP_LAG_P99_US:
        claim_p99_us = seconds.p99_of(f.claim) if f.claim.get_total_count() else None
        reasons.append(f"event-loop lag p99 {seconds.p99_of(f.loop_lag) / 1000:,.2f} ms "
                       f"(> {SUSPECT_LOOP_LAG_P99_US / 1000:g} ms): the load generator waited for a core, so it "
                       "may set the pace instead of the database, and each latency it measured (claim p99 "
                       f"{seconds.fmt_ms(claim_p99_us)}) may include that much of its own delay")
    return reasons


def _cycle_reasons(f: Figures) -> list[str]:
    """A worker cycle too long for the window, or work per claim that outlasts the lease."""
    cfg, measured_s, reasons = f.facts.cfg, f.measured_s, []
    claim_mean_s = (metrics.mean_value(f.claim) / 1e6) if f.claim.get_total_count() else 0.0
    complete_mean_s = (metrics.mean_value(f.complete_h) / 1e6) if f.complete_h.get_total_count() else 0.0
    cycle_s = claim_mean_s + f.work_s * cfg.batch + complete_mean_s
    if measured_s and cycle_s * 5 > measured_s:
        reasons.append(f"one worker cycle (claim + work + completion) takes about {cycle_s:,.2f} s, so the "
                       f"{measured_s:,.1f} s window holds fewer than 5 per worker: throughput is quantised; "
                       "use a longer DURATION")
    if f.work_s * cfg.batch > cfg.lease_s:
        reasons.append(f"the work per claim (about {f.work_s * cfg.batch:,.2f} s) outlasts the lease "
                       f"({cfg.lease_s:g} s): completions arrive after the lease expired"
                       + ("" if cfg.reaper_interval_s > 0 else ", and with no reaper nothing takes the jobs back"))
    return reasons


def _producer_reasons(f: Figures) -> list[str]:
    """Open-loop producers too far behind their schedule to offer ``RATE``."""
    cfg = f.facts.cfg
    if not (cfg.rate > 0 and f.producer_lag.get_total_count()):
        return []
    lag_p50_ms = f.producer_lag.get_value_at_percentile(50) / 1000.0
    if lag_p50_ms <= SUSPECT_PRODUCER_LAG_P50_MS:
        return []
    arrived = f.counters["jobs_produced"] / f.measured_s if f.measured_s else 0.0
    return [f"the producers ran {lag_p50_ms / 1000:,.1f} s behind their schedule (lag p50 > "
            f"{SUSPECT_PRODUCER_LAG_P50_MS / 1000:g} s): {arrived:,.1f} jobs/s arrived of RATE "
            f"{cfg.rate:g}, so the queue was not offered RATE (each insert takes longer than "
            "PRODUCERS / RATE allows: add PRODUCERS, or the database is saturated)"]


def _database_lost_reasons(f: Figures) -> list[str]:
    lost = f.facts.run_info.get("database_lost")
    return [f"the database went away during the run ({lost}); the end-of-run audit could not run, so the "
            "invariants are unknown"] if lost else []


def _process_pace_reasons(f: Figures) -> list[str]:
    """With several load generator processes: one saturated process sets the pace."""
    processes, reasons = f.facts.run_info.get("processes") or [], []
    for process in processes if len(processes) > 1 else []:
        lag = process.get("loop_lag_p99_us")
        if lag is not None and lag > SUSPECT_LOOP_LAG_P99_US:
            reasons.append(f"load generator process {process['process']}: event-loop lag p99 {lag / 1000:,.2f} ms "
                           f"(> {SUSPECT_LOOP_LAG_P99_US / 1000:g} ms): that process waited for a core")
        if (process.get("cpu_max_pct") or 0) > SUSPECT_CPU_PCT:
            reasons.append(f"load generator process {process['process']}: CPU reached {process['cpu_max_pct']:.0f} % "
                           f"of a core (> {SUSPECT_CPU_PCT:.0f} %)")
    return reasons


def _claim_log_reasons(f: Figures) -> list[str]:
    """A claim log that reached the audit empty: its clean invariants were never measured."""
    details = f.facts.audit.get("details") or {}
    if f.counters["jobs_claimed"] and details.get("jobs_claimed_distinct") == 0:
        return [f"the claim log holds none of the {f.counters['jobs_claimed']:,} jobs claimed: the audit's "
                "checks that read it (double claims, stale completions, redeliveries) checked nothing"]
    return []


def _lost_process_reasons(f: Figures) -> list[str]:
    """Processes lost during the run, except the library worker processes ``FAULTS=process_kill`` killed."""
    killed, reasons = f.counters["process_kills"], []
    for process in f.facts.run_info.get("processes") or []:
        if not process.get("lost"):
            continue
        missed = process.get("missing_seconds") or []
        since = f" from second {missed[0]} of the measured window on" if missed else ""
        if process.get("role"):  # a queue library's own worker process
            if killed:
                killed -= 1
                continue
            reasons.append(f"library worker process {process['process']} exited with status "
                           f"{process.get('exit_status')} ({process.get('exit_reason')}){since}: the rest of the "
                           "window ran without its workers, and the jobs it held waited for the library's own recovery")
        else:
            reasons.append(f"{process_name(process)} was lost{since}: its workers stopped "
                           "with it, and the claim log misses its events after its last flush (up to a second), so "
                           "what is read from the log (redeliveries, double claims) can be low; lost and duplicated "
                           "jobs are read from the database and are complete")
    return reasons


def _outcome_reasons(f: Figures) -> list[str]:
    """A backlog that ran dry, or a window with no completed job."""
    reasons = []
    if f.backlog_exhausted:
        reasons.append("the backlog ran dry: throughput is bounded by the seeded backlog")
    if f.measured_s and f.counters["jobs_completed"] == 0:
        cause = no_completion_cause(f.facts.cfg, f.counters, f.errors, f.work_s, f.measured_s)
        reasons.append(f"no job was completed in the measured window, so there is no throughput or latency to "
                       f"report: {cause}")
    return reasons


def no_completion_cause(cfg: RunConfig, counters: Counter, errors: Counter, work_s: float,
                        measured_s: float) -> str:
    """Why a window with no completed job had none: failed attempts, errors by kind, work that outlasts the
    window, or no claim finished; every cause that applies, in that order (``work_s``: mean work per job, s)."""
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
