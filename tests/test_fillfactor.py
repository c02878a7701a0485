"""FILLFACTOR against the real PostgreSQL: the queue table is created ``WITH (fillfactor = N)`` (recorded in the
run config and the table's reloptions), and HOT updates happen only where no index holds a column the claim
updates: with ``INDEX=none`` and room on the pages most updates are HOT; with any index that holds ``status``
(a key column or a partial index's predicate), or the partitioned layout's primary key (id, status), none is,
at any fillfactor (docs/choosing-a-design.md, "Fillfactor and HOT updates")."""

from __future__ import annotations

import pytest

from conftest import CLEAN_INVARIANTS, run_and_load

SHORT = ("--workers", "4", "--duration", "3s", "--warmup", "1s", "--fillfactor", "70")


@pytest.mark.slow
def test_without_an_index_on_status_a_fillfactor_below_100_makes_most_updates_hot(dsn, tmp_path):
    """INDEX=none, FILLFACTOR=70: 30 % of each page is left free at seeding and no index holds a changed column,
    so an update can stay on its page. Each job is updated twice (claim, completion); the free space alone takes
    about 15 new versions of the ~50 rows a page holds, and pruning (on a later visit to the page) reclaims the
    dead versions for the rest, so most updates are HOT (0.97 measured on the 2-core machine). The bound is half."""
    run_dir, s, _ = run_and_load(dsn, tmp_path, *SHORT, "--index", "none")
    cost = s["cost_per_job"]
    assert s["config"]["fillfactor"] == 70
    assert s["autovacuum"]["reloptions"] == {"jobs": ["fillfactor=70"]}
    assert cost["tuples_updated"] > 1 and cost["hot_update_share"] > 0.5, cost
    assert cost["hot_update_share"] == pytest.approx(cost["tuples_hot_updated"] / cost["tuples_updated"], abs=0.001)
    assert s["invariants"] == CLEAN_INVARIANTS


@pytest.mark.slow
@pytest.mark.parametrize("index, layout", [("status", "same"), ("partial", "same"), ("composite", "same"),
                                           ("covering", "same"), ("none", "partitioned")])
def test_an_index_on_a_column_the_claim_updates_forbids_hot_at_any_fillfactor(dsn, tmp_path, index, layout):
    """Every variant that holds status, and the partitioned layout (its primary key is (id, status), on
    ``jobs_live``, which gets the fillfactor): updates happen, none of them HOT, with 30 % of each page free."""
    _, s, _ = run_and_load(dsn, tmp_path, *SHORT, "--index", index, "--layout", layout)
    cost = s["cost_per_job"]
    table = "jobs_live" if layout == "partitioned" else "jobs"
    assert s["autovacuum"]["reloptions"][table] == ["fillfactor=70"], s["autovacuum"]["reloptions"]
    assert cost["tuples_updated"] > 0.5, cost  # the claim's update (and the completion's, but when partitioned)
    assert cost["tuples_hot_updated"] == 0 and cost["hot_update_share"] == 0, cost
    assert s["invariants"] == CLEAN_INVARIANTS
