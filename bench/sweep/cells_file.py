"""A sweep's ``cells.csv`` (one row per run, columns :data:`CELL_COLUMNS`) and ``sweep.json``
as the sweep driver (:mod:`bench.sweep.driver`) writes and rewrites them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from bench.config.parameter import NOT_APPLICABLE
from bench.config.run_config import RunConfig
from bench.results.cell_columns import CELL_COLUMNS, COST_COLUMNS, COST_KEYS
from bench.results.model import invariants_ok, stamped


def measured_runs(sweep_dir: Path) -> dict[tuple[str, int], dict]:
    """Rows of ``cells.csv`` already measured (status ``done``), keyed by (cell_id, rep)."""
    path = sweep_dir / "cells.csv"
    if not path.is_file():
        return {}
    with path.open(newline="") as fh:
        return {(r["cell_id"], int(r["rep"])): r for r in csv.DictReader(fh) if r["status"] == "done"}


def _flag(value: bool | str) -> int | str:
    """A yes/no parameter as cells.csv carries it: 1 or 0 (``n/a`` as is)."""
    return value if isinstance(value, str) else int(value)


def cell_row(cell_id: str, rep: int, cfg: RunConfig, *, status: str, sweep_dir: Path, run_dir: Path | None = None,
             summary: dict | None = None, seeded_backlog: int | None = None, server_release: str = "") -> dict:
    """One ``cells.csv`` row of repetition ``rep`` of cell ``cell_id`` run with ``cfg``, from its
    ``summary.json`` (``summary`` and ``run_dir`` None for a run that wrote none); ``run_dir`` relative to
    ``sweep_dir``; ``backlog`` the one really seeded (``seeded_backlog``), else the configured one;
    ``server_release`` the version the server reported (run.json's)."""
    row = {"cell_id": cell_id, "rep": rep, "status": status,
           "run_id": run_dir.name if run_dir else "", "run_dir": str(run_dir.relative_to(sweep_dir)) if run_dir else "",
           "engine": cfg.engine, "server_release": server_release, "queue": cfg.queue, "isolation": cfg.isolation,
           "policy": cfg.policy, "workers": cfg.workers, "batch": cfg.batch, "index": cfg.index,
           "layout": cfg.layout, "fillfactor": cfg.fillfactor, "history": cfg.history,
           "backlog": cfg.backlog if seeded_backlog is None else seeded_backlog, "rate": cfg.rate,
           "work_ms": cfg.work_ms, "txn": cfg.txn, "duration_s": cfg.duration_s,
           "plan_cache": cfg.plan_cache, "prepared": _flag(cfg.prepared), "autovacuum": _flag(cfg.autovacuum),
           # the embedded pooler's pool size only with one (POOLER): without, POOL_SIZE sizes nothing
           "pooler": cfg.pooler, "pool_mode": cfg.pool_mode,
           "pool_size": cfg.pool_size if cfg.pooler not in ("none", NOT_APPLICABLE) else "",
           # the delay relay's setting each way (docs/network.md): a sweep axis
           "net_delay_ms": cfg.net_delay_ms, "net_jitter_ms": cfg.net_jitter_ms,
           "sync_commit": cfg.sync_commit}  # the commit mode (docs/failover.md): a sweep axis
    if summary is None:
        return row
    claim, wait = summary["claim_latency_us"], summary.get("batch_wait_us") or {}
    plans = summary.get("plans") or {}
    pgss = summary.get("pg_stat_statements") or {}
    sizes = summary.get("table_sizes") or {}
    row.update({
        "throughput_jobs_per_s": summary["throughput_jobs_per_s"], "claims_per_s": summary["claims_per_s"],
        "jobs_completed": summary["jobs_completed"], "empty_claims": summary["empty_claims"],
        "empty_claims_while_work_waited": summary.get("empty_claims_while_work_waited"),
        "errors_total": sum(summary["errors"].values()),
        "claim_p50_us": claim["p50"], "claim_p95_us": claim["p95"], "claim_p99_us": claim["p99"],
        "claim_mean_us": claim["mean"], "complete_p99_us": summary["complete_latency_us"]["p99"],
        "batch_wait_p50_us": wait.get("p50"), "batch_wait_p99_us": wait.get("p99"),
        "oldest_age_max_s": summary["oldest_eligible_age_s"]["max"],
        "oldest_age_slope_s_per_s": summary.get("oldest_age_slope_s_per_s"),
        "plan_auto": plans.get("auto"),
        **_workers_plan_columns(plans.get("workers") or {}),
        # MariaDB: EXPLAIN FORMAT=JSON of the claim's SELECT as the load stopped (plans.explain)
        "plan_explain_scan": (plans.get("explain") or {}).get("scan"),
        "plan_explain_rows_examined": (plans.get("explain") or {}).get("rows_examined"),
        "pgss_calls": pgss.get("calls"), "pgss_mean_ms": pgss.get("mean_ms"),
        "pgss_shared_blks_per_call": pgss.get("shared_blks_per_call"),
        "harness_cpu_max_pct": summary["harness_cpu_max_pct"], "suspect": summary["suspect"],
        "relay_cpu_max_pct": ((summary.get("relay") or {}).get("cpu_pct") or {}).get("max"),
        "round_trip_p50_us": (summary.get("round_trip") or {}).get("p50_us"),  # measured, not the setting
        "invariants_ok": invariants_ok(summary),
        "saturated": summary.get("saturated"),
        # a queue definition's audit: the invariants it could not check there (space-separated names)
        "invariants_unchecked": " ".join(sorted(summary.get("uncheckable_invariants") or {})),
        # a queue library: how it was driven (``sql``: its statements from queue-bench's workers)
        "library_mode": _library_mode(summary),
        "pickup_p50_us": None if (summary.get("pickup_latency_ms") or {}).get("p50") is None
        else round(summary["pickup_latency_ms"]["p50"] * 1000.0, 1),
    })
    for mode in ("custom", "generic"):
        plan = plans.get(mode) or {}
        row.update({f"plan_{mode}_scan": plan.get("scan"), f"plan_{mode}_buffers": plan.get("shared_buffers"),
                    f"plan_{mode}_ms": plan.get("execution_ms")})
    cost = summary.get("cost_per_job") or {}
    row.update({column: cost.get(key) for column, key in zip(COST_COLUMNS, COST_KEYS)})
    for when in ("before", "after"):
        measured = sizes.get(when) or {}
        row.update({f"table_bytes_{when}": measured.get("table_bytes"),
                    f"indexes_bytes_{when}": measured.get("indexes_bytes")})
    return row


def _library_mode(summary: dict) -> str | None:
    """How a run's queue library was driven (``sql``, ``worker``), None for a queue that is not a library; an
    older summary without ``mode`` is ``sql``."""
    library = (summary.get("queue_definition") or {}).get("library")
    return (library.get("mode") or "sql") if library else None


def _workers_plan_columns(workers: dict) -> dict:
    """The ``plan_workers*`` columns: the plan the workers' own sessions ran (``plans.workers``)."""
    return {"plan_workers": workers.get("plan"), "plan_workers_scan": workers.get("scan"),
            "plan_workers_generic": workers.get("generic_executions"),
            "plan_workers_custom": workers.get("custom_executions"),
            "plan_workers_buffers": workers.get("shared_buffers"), "plan_workers_ms": workers.get("execution_ms"),
            "plan_workers_rows_examined": workers.get("rows_examined")}


def append_row(sweep_dir: Path, row: dict) -> None:
    path = sweep_dir / "cells.csv"
    new = not path.is_file()
    if not new:
        with path.open(newline="") as fh:
            header = next(csv.reader(fh), [])
        if tuple(header) != CELL_COLUMNS:  # a sweep resumed after the columns changed: keep its rows
            with path.open(newline="") as fh:
                kept = list(csv.DictReader(fh))
            _rewrite(path, kept)
    with path.open("a", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CELL_COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in CELL_COLUMNS})


def keep_only(sweep_dir: Path, rows: dict[tuple[str, int], dict]) -> None:
    """Rewrite ``cells.csv`` with just ``rows`` (in their order) if it holds any others."""
    path = sweep_dir / "cells.csv"
    if not path.is_file():
        return
    with path.open(newline="") as fh:
        total = sum(1 for _ in csv.DictReader(fh))
    if total == len(rows):
        return
    _rewrite(path, list(rows.values()))


def _rewrite(path: Path, rows: list[dict]) -> None:
    """Replace ``cells.csv`` at ``path`` with ``rows`` under the header :data:`CELL_COLUMNS`
    (a column a row lacks is empty; one the header lacks is dropped)."""
    tmp = path.with_name("cells.csv.tmp")
    with tmp.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CELL_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({k: r.get(k) or "" for k in CELL_COLUMNS} for r in rows)
    tmp.replace(path)


def write_meta(sweep_dir: Path, meta: dict) -> None:
    tmp = sweep_dir / "sweep.json.tmp"
    tmp.write_text(json.dumps(stamped(meta), indent=2, default=str) + "\n")
    tmp.replace(sweep_dir / "sweep.json")


