"""What the run reads from PostgreSQL around the load, each returning a reason instead of raising:
the fresh-statement claim plans and the claim's pg_stat_statements window."""

from __future__ import annotations

import psycopg

from bench.config.run_config import RunConfig
from bench.engines.postgres import pg_stat_statements, plans
from bench.engines.postgres.error_kinds import first_line
from bench.workload.queues import queue_count, queue_names


def capture_plans(conn: psycopg.Connection, cfg: RunConfig, when: str) -> tuple[dict | None, str]:
    """What the claim's custom and generic plans would do on a fresh statement
    (:func:`bench.engines.postgres.plans.capture_claim_plans`), and when they were taken
    (or why the capture failed)."""
    try:
        return plans.capture_claim_plans(conn, cfg.schema, cfg.policy, cfg.batch, cfg.lease_s,
                                         queues=queue_names(queue_count(cfg)),
                                         order=cfg.tenant_order if cfg.tenants > 1 else "plain"), when
    except psycopg.Error as err:
        return None, f"{when}: capture failed: {first_line(err)}"


def pgss_read(conn: psycopg.Connection, cfg: RunConfig, missing: str | None, reset: str | None) -> dict:
    """The claim's pg_stat_statements figures since the measured start, or ``{"unavailable": why}``."""
    if missing or isinstance(reset, str):
        return {"unavailable": missing or reset}
    try:
        return pg_stat_statements.read_claim(conn, cfg.schema)
    except psycopg.Error as err:
        return {"unavailable": f"read failed: {first_line(err)}"}


def pgss_reset(conn: psycopg.Connection, cfg: RunConfig, missing: str | None) -> str | None:
    """Reset the claim's pg_stat_statements entries at the measured start; a reason string if not possible."""
    if missing:
        return missing
    try:
        pg_stat_statements.reset_claim(conn, cfg.schema)
    except psycopg.Error as err:
        return f"reset failed: {first_line(err)}"
    return None
