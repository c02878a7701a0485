"""The measurements behind the experiments catalogue (``make experiments``), each on the real
database: the share of jobs started out of claim order (experiment 9) and, further down, the
engines' lock probes."""

from __future__ import annotations

import pytest

from conftest import CLEAN_INVARIANTS, MARIADB_DSN, run_and_load


@pytest.mark.parametrize("engine", ["postgres", "mariadb"])
def test_fifo_out_of_order_share_is_zero_for_one_worker_and_positive_under_contention(engine, dsn, maria_schema,
                                                                                       tmp_path):
    """Experiment 9: one worker claims a seeded backlog strictly in claim order (share 0.0
    exactly); 20 SKIP LOCKED workers claiming one job each start some jobs before a job ahead
    of them (share > 0). Both over the same backlog; the figure is a property, not an invariant."""
    target = ("--dsn", dsn) if engine == "postgres" else ("--dsn", MARIADB_DSN, "--schema", maria_schema[1])
    common = (*target[2:], "--policy", "skip_locked", "--batch", "1", "--backlog", "20000", "--work-ms", "0",
              "--warmup", "0s", "--duration", "3s")
    _, one, _ = run_and_load(target[1], tmp_path / "one", "--workers", "1", *common)
    _, many, _ = run_and_load(target[1], tmp_path / "many", "--workers", "20", *common)
    for s in (one, many):
        assert s["invariants"] == CLEAN_INVARIANTS
        assert "fifo_out_of_order_share" not in s["invariants"]
        assert s["audit"]["fifo_jobs_compared"] == s["audit"]["jobs_claimed_distinct"] > 100
    assert one["fifo_out_of_order_share"] == 0.0
    assert one["audit"]["fifo_jobs_out_of_order"] == 0
    assert 0.0 < many["fifo_out_of_order_share"] < 1.0, many["audit"]
    assert many["fifo_out_of_order_share"] == (
        many["audit"]["fifo_jobs_out_of_order"] / many["audit"]["fifo_jobs_compared"])
