"""The run's PostgreSQL reads around the load, of its queue definition's claim as the workers prepare it:
the fresh statement's plans and the pg_stat_statements window, each giving a reason instead of raising."""

from __future__ import annotations

import psycopg
from psycopg import sql

from bench.engines.base import EngineError

from bench.config.queue_definition import QueueDefinition
from bench.config.run_config import RunConfig
from bench.engines.postgres import defined_sql, pg_stat_statements, plans, policies
from bench.engines.postgres.adapter import apply_settings, reset_settings, translated
from bench.workload.queues import queue_count, queue_names


def capture_plans(conn: psycopg.Connection, cfg: RunConfig, defn: QueueDefinition, when: str) -> tuple[dict | None, str]:
    """``(plans, when)``: :func:`bench.engines.postgres.plans.capture_prepared_plans` of ``defn``'s claim as
    the workers prepare it, under their ``search_path`` and ``[settings]``; ``(None, why)`` when it failed."""
    body, names = defined_sql.positional(defined_sql.claim_body(defn, cfg.policy), defn.parameter_order.get("claim", ()))
    values = {**defined_sql.claim_values(cfg.batch, "plan-capture", cfg.lease_s),
              "queues": policies.text_array(queue_names(queue_count(cfg)))}
    try:
        with translated():
            apply_settings(conn, {"search_path": cfg.schema})
            values["worker_id"] = defined_sql.register(conn, defn)  # a library's worker row, left in the tool's schema
            apply_settings(conn, defn.settings)  # as the workers' sessions have them
            try:
                claim = (body if defn.claim_row else
                         defined_sql.wrapped_claim(defn, body, defined_sql.describe_columns(conn, body)))
                args = [sql.Literal(values[n]).as_string(None) for n in names]
                return plans.capture_prepared_plans(conn, claim, args), when
            finally:
                reset_settings(conn, ("search_path", *defn.settings))
    except EngineError as err:
        return None, f"{when}: capture failed: {err}"


def pgss_read(conn: psycopg.Connection, cfg: RunConfig, defn: QueueDefinition, missing: str | None,
              reset: str | None) -> dict:
    """The claim's pg_stat_statements figures since the measured start, or ``{"unavailable": why}``."""
    if missing or isinstance(reset, str):
        return {"unavailable": missing or reset}
    try:
        with translated():
            return (pg_stat_statements.read_claim(conn, cfg.schema, defn)
                    | pg_stat_statements.read_statements(conn, cfg.schema, defn)
                    | pg_stat_statements.read_completion(conn, cfg.schema, defn))
    except EngineError as err:
        return {"unavailable": f"read failed: {err}"}


def pgss_reset(conn: psycopg.Connection, cfg: RunConfig, defn: QueueDefinition, missing: str | None) -> str | None:
    """Reset the claim's pg_stat_statements entries at the measured start; a reason string if not possible."""
    if missing:
        return missing
    try:
        with translated():
            pg_stat_statements.reset_claim(conn, cfg.schema, defn)
    except EngineError as err:
        return f"reset failed: {err}"
    return None
