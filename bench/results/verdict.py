"""A run's verdict from its ``summary.json`` alone: the items of the report's verdict card and the terminal's
end block (aligned like pgbench's and k6's summaries), in one number style."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from bench.results import slo
from bench.results.model import invariants_ok, problems
from bench.results.values import fmt_seconds, fmt_sig
from bench.usage import setting

#: How each invariant is named in the end block's one line.
INVARIANT_WORDS = {"lost_jobs": "lost", "double_claims": "doubled", "duplicated_jobs": "duplicated",
                   "over_claims": "over-claimed", "stale_completions_applied": "stale applied",
                   "double_completions": "completed twice"}


@dataclass(frozen=True)
class Item:
    """One line of the verdict: ``ok`` True (green), False (red) or None (not applicable, grey)."""

    name: str
    value: str
    ok: bool | None
    reason: str


def _latency(summary: Mapping[str, Any]) -> Item:
    open_loop = bool(summary.get("offered_rate_jobs_per_s"))
    if open_loop:
        value = (summary.get("pickup_latency_ms") or {}).get("p99")
        return Item("pickup p99", fmt_seconds(None if value is None else value / 1000), None,
                    "the job's eligible time to its claim, database time")
    value = (summary.get("claim_latency_us") or {}).get("p99")
    return Item("claim p99", fmt_seconds(None if value is None else value / 1e6), None,
                "commit included; closed loop, so pickup is only the backlog's age")


def _slo(summary: Mapping[str, Any]) -> list[Item]:
    verdict = summary.get("slo")
    if not verdict:
        return []
    missed = [o for o in verdict["objectives"] if o["status"] != "pass"]
    reason = "; ".join(f"{slo.phrase(o)} ({o['status']})" for o in missed)
    if verdict["status"] == "inconclusive" and verdict.get("inconclusive_because"):
        reason += " because " + "; ".join(verdict["inconclusive_because"])
    return [Item("SLO", verdict["status"], verdict["status"] == "pass",
                 reason or ", ".join(slo.phrase(o) for o in verdict["objectives"]))]


def _keeping_up(summary: Mapping[str, Any]) -> Item:
    if not summary.get("offered_rate_jobs_per_s"):
        return Item("keeps up", "n/a", None, "closed loop, no RATE: the workers drain a seeded backlog")
    if summary.get("saturated") is None:
        return Item("keeps up", "not assessed", None, summary.get("saturation_verdict") or "")
    return Item("keeps up", "no" if summary.get("saturated") else "yes", not summary.get("saturated"),
                summary.get("saturation_verdict") or "")


def _errors(summary: Mapping[str, Any]) -> Item:
    errors = dict(summary.get("errors") or {})
    refusals = summary.get("nowait_retries") or 0
    total = slo.errors_beyond_refusals(summary)
    kinds = ", ".join(f"{k}: {v:,}" for k, v in sorted(errors.items(), key=lambda kv: -kv[1]))
    note = f" ({refusals:,} NOWAIT refusals, the policy's normal, not counted)" if refusals else ""
    return Item("errors", f"{total:,}", total == 0, (kinds or "none") + note)


def _claim_errors(summary: Mapping[str, Any]) -> str:
    """The claim row's errors cell: the errors, and NOWAIT's refusals beside them (the progress line counts both)."""
    refusals = summary.get("nowait_retries") or 0
    return _errors(summary).value + (f" +{refusals:,} NOWAIT" if refusals else "")


def _invariants(summary: Mapping[str, Any]) -> Item:
    ok = invariants_ok(summary)
    invariants = summary.get("invariants") or {}
    if ok is None:
        return Item("invariants", "not checked", False, "the audit did not run (the database went away)")
    counts = ", ".join(f"{v:,} {INVARIANT_WORDS.get(k, k)}" for k, v in invariants.items())
    explained = {k: n for k, n in ((((summary.get("failover") or {}).get("losses") or {}).get("explained") or {})
                                   .items()) if n}
    if explained:  # what the audit found and the promotion's losses account for: not counted above
        counts += ("; besides, explained by the failover's lost acknowledged work: "
                   + ", ".join(f"{n:,} {INVARIANT_WORDS.get(k, k)}" for k, n in explained.items()))
    return Item("invariants", f"{len(invariants)} hold" if ok else "broken", ok, counts)


def _effects(summary: Mapping[str, Any]) -> list[Item]:
    """``EFFECTS``' audit: red for a job completed with no effect, or for a duplicate or a stale attempt's effect
    where the mode promises one effect (``same_txn``; ``idempotent``: duplicates); grey for ``outside``'s
    duplicates, which at least once allows. None without effects."""
    e = summary.get("effects")
    if not e:
        return []
    stale = e["stale_attempt_effects"]  # None: the queue has no token the audit can read
    # across a promotion the table lost rows with the old primary: the client's log counts what it cannot
    lost = ((summary.get("failover") or {}).get("losses") or {}).get("effects") or {}
    twice = lost.get("effects_written_twice") or 0
    promised = {"same_txn": e["duplicate_jobs"] + (stale or 0) + twice,
                "idempotent": e["duplicate_jobs"] + twice}.get(e["mode"], 0)
    ok = False if e["missing_effects"] or promised else (None if e["duplicate_jobs"] or twice else True)
    per = e.get("duplicates_per_1000_redeliveries")
    stale_text = "not counted (no attempt token to read)" if stale is None else f"{stale:,}"
    reason = (f"{e['duplicate_jobs']:,} jobs with more than one, {e['extra_effects']:,} extra rows, "
              f"{e['missing_effects']:,} done with none, {stale_text} from a stale attempt; "
              f"{e['written']:,} rows in the effects table, {e['redeliveries']:,} redeliveries"
              + ("" if per is None else f", {fmt_sig(per)} duplicates per 1,000 redeliveries")
              + (f"; across the promotion, from the client's log: {twice:,} jobs whose effect was written twice, "
                 f"{lost['acknowledged_effects_missing']:,} acknowledged rows the table lost" if lost else ""))
    client = f", {twice:,} by the client's log" if lost else ""
    return [Item("effects", f"{e['mode']}: {e['duplicate_jobs']:,} duplicated{client}", ok, reason)]


def _trust(summary: Mapping[str, Any]) -> Item:
    found = problems(summary)
    found = [p for p in found if not p.startswith("invariants broken")]  # its own line
    return Item("trust", "trusted" if not found else "suspect", not found, "; ".join(found) or
                f"load generator CPU max {fmt_sig(summary.get('harness_cpu_max_pct'))} %, event-loop lag p99 "
                f"{fmt_seconds(((summary.get('loop_lag_us') or {}).get('p99') or 0) / 1e6)}"
                + _relay_text(summary) + _outside_text(summary))


def _relay_text(summary: Mapping[str, Any]) -> str:
    """", delay relay CPU max N %" (its process, % of one core), or nothing for a run without the relay."""
    cpu = (((summary.get("relay") or {}).get("cpu_pct")) or {}).get("max")
    return "" if cpu is None else f", delay relay CPU max {fmt_sig(cpu)} %"


def _outside_text(summary: Mapping[str, Any]) -> str:
    """", machine outside the run N %" (the window's mean, % of all cores), or nothing for a run without it."""
    outside = (summary.get("outside_cpu_pct") or {}).get("mean")
    return "" if outside is None else f", machine CPU outside the run {float(outside):.1f} %"  # as measured: one decimal


def items(summary: Mapping[str, Any]) -> list[Item]:
    """The verdict card's items, in order: throughput, pickup or claim p99, keeping up, the SLO (when one
    was given), errors, invariants, effects (``EFFECTS``), trust."""
    throughput = Item("throughput", f"{fmt_sig(summary.get('throughput_jobs_per_s'))} jobs/s", None,
                      f"{summary.get('jobs_completed', 0):,} jobs completed over {fmt_sig(summary.get('measured_s'))} s")
    return [throughput, _latency(summary), _keeping_up(summary), *_slo(summary), _errors(summary),
            _invariants(summary), *_effects(summary), _trust(summary)]


def operations(summary: Mapping[str, Any]) -> list[list[str]]:
    """One row per operation (claim, completion, pickup): name, count, rate/s, p50, p95, p99, max, errors; a
    claim's and a completion's count is of statements, each timed once, a pickup's of jobs."""
    measured_s = summary.get("measured_s") or 0.0
    claims = slo.claim_count(summary)
    rows = []
    for name, key, scale, count, errors in (
            ("claim", "claim_latency_us", 1e-6, claims, _claim_errors(summary)),
            ("completion", "complete_latency_us", 1e-6, _completions(summary),
             f"{summary.get('stale_completions') or 0:,} stale"),
            ("pickup", "pickup_latency_ms", 1e-3, summary.get("jobs_claimed") or 0, "")):
        latency = summary.get(key) or {}
        if name == "pickup" and not summary.get("offered_rate_jobs_per_s"):
            continue  # closed loop: pickup is the seeded backlog's age, not a latency
        rows.append([name, f"{count:,}", fmt_sig(count / measured_s if measured_s else None),
                     *(fmt_seconds(None if latency.get(p) is None else latency[p] * scale)
                       for p in ("p50", "p95", "p99", "max")), errors])
    return rows


def _completions(summary: Mapping[str, Any]) -> int:
    """Completion statements in the window (a summary written before ``completions``: its jobs completed)."""
    return summary.get("completions", summary.get("jobs_completed")) or 0


def cost_line(summary: Mapping[str, Any]) -> str | None:
    """What a job cost the database (``cost_per_job``) in one line, naming the engine's log (``log``) and
    leaving out what the run did not count; None when the run did not measure the log's bytes."""
    cost = summary.get("cost_per_job") or {}
    if cost.get("wal_bytes") is None:
        return None
    given = (lambda *keys: all(cost.get(k) is not None for k in keys))
    wal = [f"{fmt_sig(cost['wal_fpi_bytes'])} B of it full-page images"] if given("wal_fpi_bytes") else []
    wal += [f"{fmt_sig(cost['wal_records'])} records"] if given("wal_records") else []
    parts = [f"{fmt_sig(cost['wal_bytes'])} B of {cost.get('log') or 'WAL'}" + (f" ({', '.join(wal)})" if wal else "")]
    if given("server_cpu_us"):
        parts.append(f"{fmt_sig(cost['server_cpu_us'])} µs of server CPU")
    elif given("statements_exec_us"):
        parts.append(f"{fmt_sig(cost['statements_exec_us'])} µs in statements (pg_stat_statements; not CPU time)")
    hot = cost.get("hot_update_share")
    if given("tuples_updated"):
        parts.append(f"{fmt_sig(cost['tuples_updated'])} row updates" + ("" if hot is None else f" ({100 * hot:.0f} % HOT)"))
    parts += [f"{fmt_sig(cost[k])} {name}" for k, name in (("tuples_inserted", "row inserts"),
                                                          ("tuples_deleted", "row deletes")) if cost.get(k)]
    if given("buffers_hit", "buffers_read"):
        parts.append(f"{fmt_sig(cost['buffers_hit'])} buffers hit and {fmt_sig(cost['buffers_read'])} read")
    if not given("wal_fpi_bytes") and cost.get("log") == "WAL" and given("wal_fpi_bytes_read"):
        parts.append(f"full-page image bytes not read: {cost['wal_fpi_bytes_read']}")
    return ", ".join(parts)


def end_block(summary: Mapping[str, Any]) -> list[str]:
    """The terminal's end block: a throughput line, the operations table, the oldest age, the cost per job
    (when measured), then invariants, effects, trust and keeping up (or the SLO), one line each."""
    head = ["", "count", "rate/s", "p50", "p95", "p99", "max", "errors"]
    table = [head, *operations(summary)]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    lines = [f"throughput {fmt_sig(summary.get('throughput_jobs_per_s'))} jobs/s over "
             f"{fmt_sig(summary.get('measured_s'))} s ({summary.get('jobs_completed', 0):,} jobs completed, "
             f"{summary.get('empty_claims', 0):,} empty claims)"]
    for row in table:
        lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))).rstrip())
    age = summary.get("oldest_eligible_age_s") or {}
    slope = summary.get("oldest_age_slope_s_per_s")
    if age.get("max") is None and (summary.get("config") or {}).get("monitor") == "stats":
        lines.append(f"oldest eligible age: not sampled ({setting('monitor', 'stats', quote=False)}: the monitor's "
                     "table queries were off)")
    else:
        lines.append(f"oldest eligible age: max {fmt_seconds(age.get('max'))}, last sample "
                     f"{fmt_seconds(age.get('final'))}" + ("" if slope is None else f", trend {slope:+.3f} s per s"))
    if (cost := cost_line(summary)) is not None:
        lines.append(f"cost per job: {cost}")
    by_name = {item.name: item for item in items(summary)}
    for name in ("invariants", "effects", "trust", "keeps up", "SLO"):
        if (item := by_name.get(name)) is None:
            continue
        lines.append(f"{item.name}: {item.value}" + (f" ({item.reason})" if item.reason else ""))
    return lines
