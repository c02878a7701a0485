"""The built-in queue as a definition generated from the run's parameters
(:mod:`bench.engines.postgres.builtin_queue`): its claim is the one text the workers prepare and the one
pgbench prepares for ``make calibrate`` (read back from the server's ``pg_prepared_statements`` in
pgbench's own session); its table, layouts and index variants are the schema files'; and every
statement it generates parses on the real PostgreSQL in every layout.
"""

from __future__ import annotations

import hashlib
import itertools
import subprocess

import psycopg
import pytest
from psycopg import sql

from bench.config.choices import LAYOUTS, POLICIES, TENANT_ORDERS
from bench.config.run_config import build_config
from bench.config.sql_text import render, replace_locking, scan_parameters
from bench.engines.postgres import builtin_queue, db
from bench.engines.postgres.defined_sql import claim_body, positional
from bench.engines.postgres.pgbench import claim_complete_script, find_pgbench
from bench.engines.common import LOCKING_CLAUSE
from bench.engines.postgres.adapter.wire import rows
from bench.engines.postgres.sessions import PgWorkerSession
from bench.workload.queues import queue_count

#: SHA-256 of the default run's claim (POLICY=skip_locked, one queue name) as the workers prepared it
#: before the generator (bench/engines/postgres/policies.py at 8027ee5): pinned, so a change of the
#: generator that changes the SQL the workers send is seen here.
DEFAULT_CLAIM_SHA256 = "d7c60641203be9719bab0aa0a9dc779d8c804bad992eff3ca647ed57ce19d49b"

#: PostgreSQL's index variants (INDEX).
INDEXES_POSTGRES = ("none", "status", "composite", "partial", "covering")
#: Queue names of a run: (named_queues, tenants, tenant_order).
QUEUE_SHAPES = [(1, 1, "plain"), (3, 1, "plain")] + [(1, 3, order) for order in TENANT_ORDERS]


def _cfg(policy="skip_locked", batch=1, index="partial", layout="same", queues=(1, 1, "plain")):
    named, tenants, order = queues
    given = {"schema": "qbench", "policy": policy, "batch": batch, "index": index, "layout": layout,
             "named_queues": named, "tenants": tenants}
    return build_config("default", given | ({"tenant_order": order} if tenants > 1 else {}))


def _expected(cfg, name: str, placeholder=lambda i, _param: f"${i}") -> str:
    """Statement ``name`` of :func:`builtin_queue.statement` for ``cfg``'s queue names and tenant order,
    with ``cfg.policy``'s locking clause, each parameter rendered by ``placeholder`` (``$n`` by default):
    the text the workers sent before they read their statements from the definition."""
    order = cfg.tenant_order if cfg.tenants > 1 else "plain"
    text, params = builtin_queue.statement(name, cfg.schema, queue_count(cfg), order)
    return render(replace_locking(text, LOCKING_CLAUSE[cfg.policy]), placeholder, params)[0]


def test_the_default_claim_is_the_pinned_text():
    cfg = _cfg()
    defn = builtin_queue.definition(cfg)
    claim = positional(claim_body(defn, cfg.policy), defn.parameter_order["claim"])[0]  # as the workers prepare it
    assert hashlib.sha256(claim.encode()).hexdigest() == DEFAULT_CLAIM_SHA256, claim
    assert claim == _expected(cfg, "claim")


@pytest.mark.parametrize("policy,batch,index,layout,queues", list(itertools.product(
    POLICIES, (1, 16), INDEXES_POSTGRES, LAYOUTS, QUEUE_SHAPES)))
def test_the_generated_claim_is_the_workers_claim(policy, batch, index, layout, queues):
    """For every policy, batch, index variant, layout and queue-name shape: the definition generated
    from the run's parameters, its ``{locking}`` filled and its ``:name`` parameters numbered in the
    claim's order, is the statement the workers prepare for that run, byte for byte."""
    cfg = _cfg(policy, batch, index, layout, queues)
    defn = builtin_queue.definition(cfg)
    order = cfg.tenant_order if cfg.tenants > 1 else "plain"
    params = builtin_queue.statement("claim", cfg.schema, queue_count(cfg), order)[1]
    assert render(claim_body(defn, policy), lambda i, _n: f"${i}", params)[0] == _expected(cfg, "claim")
    for statement in ("complete", "complete_many", "fail"):
        text, params = builtin_queue.statement(statement, cfg.schema)
        assert render(defn.statements[statement], lambda i, _n: f"${i}", params)[0] == _expected(cfg, statement)
    assert defn.statements["reaper"] == builtin_queue.statement("reaper", cfg.schema)[0]
    assert defn.locking and defn.uses("claim", "batch") and defn.uses("claim", "lease_s")
    assert ("queues" in {n for _, _, n in scan_parameters(defn.statements["claim"])}) == (queue_count(cfg) > 1)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_generated_table_indexes_and_statements_parse_in_every_layout(dsn, layout):
    """The definition's DDL creates the table in ``layout``; each index variant builds on it; each
    statement, rendered as the workers render it, is accepted by the server (described, not run)."""
    cfg = _cfg(layout=layout, queues=(1, 3, "round_robin"))
    defn = builtin_queue.definition(cfg)
    assert (") PARTITION BY LIST (status);" in defn.ddl) == (layout == "partitioned")
    assert ("CREATE TABLE \"qbench\".jobs_archive" in defn.ddl) == (layout == "archive")
    assert set(defn.indexes) == set(INDEXES_POSTGRES) and defn.default_index == "partial"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS qbench CASCADE; CREATE SCHEMA qbench"))
        conn.execute(defn.ddl)
        conn.execute(builtin_queue.schema_ddl("tenants.sql", cfg.schema))
        for name, ddl in defn.indexes.items():
            if ddl.strip():
                conn.execute(ddl)
        for name in defn.statements:
            text, params = builtin_queue.statement(name, cfg.schema, queue_count(cfg), cfg.tenant_order)
            body = render(text.replace("{locking}", "FOR UPDATE SKIP LOCKED"), lambda i, _n: f"${i}", params)[0]
            result = conn.pgconn.prepare(name.encode(), body.encode())
            assert result.status == psycopg.pq.ExecStatus.COMMAND_OK, (name, result.error_message)
        conn.execute("DROP SCHEMA qbench CASCADE")


@pytest.mark.parametrize("batch", [1, 3])
def test_pgbench_prepares_the_workers_own_claim(dsn, tmp_path, batch):
    """``make calibrate``'s script (:func:`claim_complete_script` of the run's definition), run by pgbench
    with ``-M prepared`` and one more line that copies its session's ``pg_prepared_statements`` into a
    table: with batch 1 the claim pgbench prepared is the workers' claim byte for byte; with more, that
    claim is the gathering CTE's body. The completion is the workers' with its ending ``;``."""
    cfg = build_config("default", {"schema": "qbench", "history": 0, "batch": batch}, dsn=dsn)
    with db.connect(dsn) as conn:
        db.prepare(conn, cfg, 100, log=lambda _m: None)
        conn.execute("CREATE TABLE qbench.seen (statement text)")
    script = claim_complete_script(builtin_queue.definition(cfg), cfg.policy, cfg.lease_s, batch)
    (tmp_path / "script.sql").write_text(script + "INSERT INTO qbench.seen SELECT statement FROM pg_prepared_statements;\n")
    proc = subprocess.run([find_pgbench(), "-n", "-M", "prepared", "-f", str(tmp_path / "script.sql"), "-t", "2",
                           "-c", "1", dsn], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with db.connect(dsn) as conn:
        seen = {row[0] for row in conn.execute("SELECT statement FROM qbench.seen")}
        done = conn.execute("SELECT count(*) FROM qbench.jobs WHERE status = 'done'").fetchone()[0]
    assert done == 2 * batch
    if batch == 1:
        assert _expected(cfg, "claim") in seen and _expected(cfg, "complete") + ";" in seen
    else:
        assert any(s.startswith("WITH claimed AS (" + _expected(cfg, "claim") + ") SELECT") for s in seen), seen
        assert _expected(cfg, "complete_many") + ";" in seen


@pytest.mark.parametrize("queues,prepared", [((1, 1, "plain"), True), ((1, 3, "round_robin"), True),
                                             ((3, 1, "plain"), False)])
def test_the_workers_session_prepares_the_generated_statements(dsn, queues, prepared):
    """The one PostgreSQL worker session, fed by the generated definition, prepares the statements the
    workers sent before the generator (:func:`_expected`; read back from its own
    ``pg_prepared_statements``), the claim not wrapped; with ``PREPARED=0`` its claim text is that claim
    with its values as SQL literals; one claim and its completion run."""
    named, tenants, order = queues
    given = {"schema": "qbench", "history": 0, "named_queues": named, "tenants": tenants, "prepared": prepared}
    cfg = build_config("default", given | ({"tenant_order": order} if tenants > 1 else {}), dsn=dsn)
    with db.connect(dsn) as conn:
        db.prepare(conn, cfg, 10, log=lambda _m: None)
    session = PgWorkerSession(dsn, cfg, "worker-1")
    try:
        seen = {r[0].decode(): r[1].decode() for r in rows(session.session.query(
            b"SELECT name, statement FROM pg_prepared_statements"))}
        names = [f"q{i}" for i in range(queue_count(cfg))] if queue_count(cfg) > 1 else ["default"]
        values = {"batch": int(cfg.batch), "worker": "worker-1", "lease_s": float(cfg.lease_s),
                  "queues": "{" + ",".join(names) + "}"}
        if prepared:
            assert seen["claim"] == _expected(cfg, "claim")
        else:
            assert "claim" not in seen and session.claim_text.decode() == _expected(
                cfg, "claim", lambda _i, param: sql.Literal(values[param]).as_string(None))
        assert (seen["complete"], seen["complete_many"], seen["fail"]) == (
            _expected(cfg, "complete"), _expected(cfg, "complete_many"), _expected(cfg, "fail"))
        claimed = session.claim()
        assert len(claimed) == 1 and session.complete([claimed[0][:2]]) == {claimed[0][0]}
    finally:
        session.close()
