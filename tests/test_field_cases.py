"""Field cases (docs/field-cases.md) that a single run can show (FR-08, the FR-01 shape).

FR-08: without an index on the eligible predicate every claim is a sequential
scan and sort of the whole table, and the queue collapses; the run's captured
claim plan says why. Compared in the same test, on the same server, so the
assertion is a ratio, not an absolute time.
"""

from __future__ import annotations

import pytest

from conftest import CLEAN_INVARIANTS, run_and_load


@pytest.mark.slow
def test_no_index_collapses_and_the_plan_says_why(dsn, tmp_path):
    """INDEX=none vs INDEX=partial, 200k pending rows, 10 workers: claim p50 at least 10x worse
    without the index, the captured plan a Seq Scan for one and the partial index for the other."""
    common = ["--workers", "10", "--backlog", "200000", "--duration", "4s", "--warmup", "1s"]
    none_dir, none, _ = run_and_load(dsn, tmp_path / "none", "--index", "none", *common)
    part_dir, part, _ = run_and_load(dsn, tmp_path / "partial", "--index", "partial", *common)

    assert none["claim_latency_us"]["p50"] >= 10 * part["claim_latency_us"]["p50"], (none["claim_latency_us"],
                                                                                   part["claim_latency_us"])
    assert part["throughput_jobs_per_s"] >= 10 * none["throughput_jobs_per_s"]
    none_plan = (none_dir / "claim_plan.txt").read_text()
    part_plan = (part_dir / "claim_plan.txt").read_text()
    assert "Seq Scan on jobs" in none_plan and "Buffers:" in none_plan
    assert "jobs_pending_claim_order_idx" in part_plan
    # The plan the workers' prepared claim uses (custom here) finds and updates rows through indexes only.
    assert part["plans"]["auto"] == "custom"
    assert "Seq Scan" not in part["plans"]["custom"]["scan"], part["plans"]["custom"]
    assert "Seq Scan on jobs" in (none_dir / "report.html").read_text()
    for s in (none, part):
        assert s["invariants"] == CLEAN_INVARIANTS
