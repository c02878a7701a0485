"""Many named queues in one table (NAMED_QUEUES, field case FR-11): the spread of seeded rows over
the names, the claim over the whole list, the jobs completed per queue and Jain's index of them."""

from __future__ import annotations

from collections import Counter

import psycopg
import pymysql
import pytest

from bench.analysis.fairness import jain_index, per_queue_figures
from bench.workload.queues import queue_index, queue_names, seeded_u
from tests.conftest import CLEAN_INVARIANTS, run_and_load


def test_jain_index_is_one_for_equal_shares_and_one_over_n_for_one_taker():
    assert jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([8, 0, 0, 0]) == pytest.approx(0.25)
    # (1 + 3)^2 / (2 (1 + 9)) = 0.8
    assert jain_index([1, 3]) == pytest.approx(0.8)
    assert jain_index([0, 0]) is None
    compact = per_queue_figures({f"q{i}": i for i in range(200)})["jobs_completed_per_queue"]
    assert compact == {"queues": 200, "min": 0, "max": 199, "total": sum(range(200))}


def test_the_spread_gives_each_queue_its_share_and_the_flooder_its_own():
    ids = range(1, 20_001)
    even = Counter(queue_index(seeded_u(i), 10, 0.1) for i in ids)
    assert sorted(even) == list(range(10))
    assert max(even.values()) - min(even.values()) <= 20  # of 2,000 each
    flooded = Counter(queue_index(seeded_u(i), 4, 0.9) for i in ids)
    assert abs(flooded[0] - 18_000) <= 20
    assert all(abs(flooded[k] - 666) <= 20 for k in (1, 2, 3))


def _check_run(summary: dict, names: list[str]) -> dict:
    assert summary["invariants"] == CLEAN_INVARIANTS
    assert summary["max_rows_per_claim"] <= summary["config"]["batch"]
    per_queue = summary["jobs_completed_per_queue"]
    assert sorted(per_queue) == sorted(names)
    assert min(per_queue.values()) > 0, per_queue
    # By finished_at on the server against the client's count of acknowledged completions: the
    # window's edges may move a few jobs between them, no more.
    assert abs(sum(per_queue.values()) - summary["jobs_completed"]) <= 0.02 * summary["jobs_completed"] + 10
    assert 0.9 < summary["fairness_jain"] <= 1.0
    return per_queue


def test_ten_named_queues_on_postgres_run_clean_and_each_queue_completes(dsn, tmp_path):
    run_dir, summary, _ = run_and_load(dsn, tmp_path, "--named-queues", "10", "--duration", "2s", "--warmup", "0s",
                                       "--workers", "4", "--batch", "3", "--history", "500", "--backlog", "6000",
                                       "--schema", "qbench_nq")
    _check_run(summary, queue_names(10))
    plan = (run_dir / "claim_plan.txt").read_text()
    assert "queue = ANY ('{q0,q1,q2,q3,q4,q5,q6,q7,q8,q9}'::text[])" in plan
    assert "Index Scan using jobs_pending_claim_order_idx" in plan  # the partial index still serves the claim
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, queue FROM qbench_nq.jobs").fetchall()
    assert len(rows) == 6500
    assert all(q == f"q{queue_index(seeded_u(i), 10, 0.1)}" for i, q in rows)  # the SQL spread is the Python one


def test_named_queues_with_producers_and_an_unprepared_claim(dsn, tmp_path):
    _, summary, _ = run_and_load(dsn, tmp_path, "--named-queues", "5", "--duration", "2s", "--warmup", "0s",
                                 "--workers", "3", "--rate", "400", "--prepared", "0", "--schema", "qbench_nqp")
    _check_run(summary, queue_names(5))
    with psycopg.connect(dsn) as conn:
        produced = dict(conn.execute("SELECT queue, count(*) FROM qbench_nqp.jobs GROUP BY queue").fetchall())
    assert sorted(produced) == queue_names(5)


def test_ten_named_queues_on_mariadb_run_clean(maria_schema, tmp_path):
    dsn, schema = maria_schema
    _, summary, _ = run_and_load(dsn, tmp_path, "--named-queues", "10", "--duration", "2s", "--warmup", "0s",
                                 "--workers", "3", "--backlog", "3000", "--rate", "50", "--schema", schema)
    _check_run(summary, queue_names(10))
    from bench.engines.mariadb.dsn import connect_args

    conn = pymysql.connect(**connect_args(dsn))
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT id, queue FROM `{schema}`.jobs WHERE id <= 3000")
            rows = cur.fetchall()
    finally:
        conn.close()
    assert all(q == f"q{queue_index(seeded_u(i), 10, 0.1)}" for i, q in rows)


def test_the_ready_table_variant_refuses_named_queues():
    from bench.config.run_config import build_config
    from bench.errors import ConfigError

    with pytest.raises(ConfigError, match="NAMED_QUEUES"):
        build_config("default", {"engine": "mariadb", "index": "ready_table", "named_queues": 2},
                     dsn="mysql://root@127.0.0.1:3306/")
