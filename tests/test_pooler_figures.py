"""The pooler's figures from its console (docs/poolers.md, "Reading the pooler figures"), in process against a
fake console (the database is not the point here): the per-second growth of PgBouncer's totals, the means as
ratios of growths, a counter reset and a missed second, and the summary's means over the seconds that have both.
The real console is read in tests/test_pooler_embedded.py."""

from __future__ import annotations

from bench.engines.base import EngineError
from bench.engines.postgres.pooler.watch import PoolerWatch
from bench.measure.pooler_seconds import pooler_columns
from bench.run_summary.pooler import pooler_figures, pooler_line

DATABASE, USER = "app", "me"


class FakeConsole:
    """Answers ``SHOW POOLS`` and ``SHOW STATS`` from a list of (pools, totals) per read; None: the read fails."""

    def __init__(self, reads):
        self.reads, self.sent = list(reads), []

    def rows(self, command):
        self.sent.append(command)
        read = self.reads[0] if command == "SHOW POOLS" else self.reads.pop(0)
        if read is None:
            self.reads.pop(0)  # the read of this second failed at its first command
            raise EngineError("08006", "server closed the connection unexpectedly", lost=True)
        pools, totals = read
        if command == "SHOW POOLS":
            return [{"database": "pgbouncer", "user": "pgbouncer", "cl_active": 1, "cl_waiting": 9, "sv_active": 0,
                     "sv_idle": 0, "sv_used": 0, "sv_tested": 0, "sv_login": 0, "maxwait": 9, "maxwait_us": 0},
                    {"database": DATABASE, "user": USER, **pools}]
        return [{"database": "pgbouncer", "total_xact_count": 999, "total_query_count": 999, "total_wait_time": 999,
                 "total_xact_time": 999, "total_query_time": 999},
                {"database": DATABASE, **totals}]

    def close(self):
        pass


def _pool(waiting: int, maxwait_s: int = 0, maxwait_us: int = 0) -> dict:
    return {"cl_active": 10, "cl_waiting": waiting, "sv_active": 10, "sv_idle": 0, "sv_used": 1, "sv_tested": 0,
            "sv_login": 1, "maxwait": maxwait_s, "maxwait_us": maxwait_us}


def _totals(xacts: int, wait_us: int, xact_us: int, queries: int = 0, query_us: int = 0) -> dict:
    return {"total_xact_count": xacts, "total_query_count": queries or 2 * xacts, "total_wait_time": wait_us,
            "total_xact_time": xact_us, "total_query_time": query_us or xact_us // 2}


def _watched(reads) -> dict[int, dict]:
    """Second -> sample of a watch over the fake console, each sample one second after the previous."""
    watch = PoolerWatch("postgresql://me@127.0.0.1:6432/pgbouncer", DATABASE, USER, pid=None)
    watch.console = FakeConsole(reads)
    samples = {}
    for k in range(len(reads)):
        sample = watch.sample()
        if "pooler_at_s" in sample:
            sample["pooler_at_s"] = float(k)
        samples[k] = sample
    assert watch.errors == sum(1 for r in reads if r is None)
    return samples


def test_the_growth_of_the_totals_gives_each_seconds_figures_and_the_means_are_ratios_of_growths():
    """Only the run's pool and database are read; the mean wait of a second is its wait growth over its
    transactions' growth; the oldest wait joins maxwait's seconds and microseconds."""
    samples = _watched([(_pool(3), _totals(100, 50_000, 400_000)),
                        (_pool(5, 1, 250_000), _totals(300, 450_000, 1_200_000))])
    assert samples[1]["pooler_cl_waiting"] == 5 and samples[1]["pooler_maxwait_us"] == 1_250_000
    assert samples[1]["pooler_server_conns"] == 12  # active 10, used 1, login 1
    columns = pooler_columns(samples, 1)
    assert (columns["pooler_xacts"], columns["pooler_wait_us"], columns["pooler_queries"]) == (200, 400_000, 400)
    assert columns["pooler_wait_mean_us"] == 2000.0 and columns["pooler_xact_mean_us"] == 4000.0
    assert columns["pooler_query_mean_us"] == 1000.0 and columns["pooler_cpu_pct"] is None  # no pid: not measured
    assert pooler_columns({}, 1) == {}  # no pooler read: no column


def test_a_counter_reset_and_a_missed_second_give_no_growth_and_drop_out_of_the_runs_means():
    """Second 2's read fails (no growth in seconds 2 and 3), the pooler restarts before second 5 (its totals fall:
    no growth in second 5); the run's mean wait is the summed waits over the summed transactions of the seconds
    left (1, 4, 6), never a mean of per-second means."""
    reads = [(_pool(0), _totals(1_000, 0, 100_000)),
             (_pool(4), _totals(1_100, 100_000, 200_000)),      # +100 xacts, +100 ms of waits
             None,                                               # missed
             (_pool(4), _totals(1_500, 900_000, 600_000)),
             (_pool(8), _totals(1_800, 2_100_000, 900_000)),     # +300 xacts, +1,200 ms of waits
             (_pool(0), _totals(50, 10_000, 5_000)),             # restarted: the totals began again
             (_pool(2), _totals(150, 30_000, 105_000))]          # +100 xacts, +20 ms of waits
    samples = _watched(reads)
    rows = [{"t_s": k - 1, **samples[k], **pooler_columns(samples, k)} for k in range(1, len(reads))]
    by_second = {r["t_s"] + 1: r for r in rows}
    assert [by_second[k]["pooler_xacts"] for k in range(1, 7)] == [100, None, None, 300, None, 100]
    assert by_second[2].get("pooler_cl_waiting") is None and by_second[5]["pooler_wait_mean_us"] is None
    assert by_second[4]["pooler_wait_mean_us"] == 4000.0
    info = {"pooler": {"embedded": None, "pool_mode": "transaction", "console_source": "POOLER_ADMIN_DSN",
                       "detection": {"concluded": "transaction pooling detected"}, "console": None,
                       "mode_disagrees": [], "sampler_errors": 1}}
    block = pooler_figures(rows, info, 90.0)
    assert block["transactions"] == 500 and block["wait_mean_us"] == round(1_320_000 / 500, 1)
    assert block["seconds_sampled"] == 5 and block["seconds_with_waiting"] == 4 and block["clients_waiting"]["max"] == 8
    assert block["cpu_pct"] is None and block["cpu_not_measured"].startswith("not measured")
    assert not any("p95" in key or "p99" in key or "percentile" in key for key in block)
    line = pooler_line(block)
    assert line.startswith("pooler (yours, transaction): clients waiting mean") and "mean wait per transaction 2.640 ms" in line
    assert "p99" not in line and "p95" not in line


def test_without_a_console_the_pooler_block_says_not_measured():
    info = {"pooler": {"embedded": None, "pool_mode": "session", "console_source": None, "detection":
                       {"concluded": "pooling not detected"}, "console": None, "mode_disagrees": [],
                       "sampler_errors": None}}
    block = pooler_figures([{"t_s": 0}], info, 90.0)
    assert block["measured"] is False and "POOLER_ADMIN_DSN" in block["not_measured"]
    assert pooler_line(block) == ("pooler (yours, session): not measured: no console to read (POOLER_ADMIN_DSN not "
                                  "given); pooling not detected")
    assert pooler_figures([], {"pooler": None}, 90.0) is None


def test_behind_a_pooler_lock_waiters_are_not_attributed_to_workers():
    """The migration window's lock queue folded with a waiting 'worker' backend: counted as a worker's wait on a
    direct connection; behind a pooler (``workers_known`` False) the workers' waits, the stall and the delayed claims
    are None (not measured), the requests by mode still counted; and the summary says why."""
    from bench.engines.lock_queue import LockQueueFold
    from bench.run_summary.migration import BEHIND_POOLER, migrations

    row = ({"AccessExclusiveLock": 1, "RowExclusiveLock": 3}, [(4242, "2026-01-01 00:00:00")], 0.5, True)
    direct, pooled = LockQueueFold(), LockQueueFold()
    pooled.workers_known = False
    seconds = {}
    for name, fold in (("direct", direct), ("pooled", pooled)):
        acc = fold.new_second()
        fold.fold(acc, row, 100.0)
        seconds[name] = acc
    assert (seconds["direct"]["lock_queue_workers"], seconds["direct"]["delayed_claims"]) == (1, 1)
    assert seconds["direct"]["stall_ms"] == 100
    assert all(seconds["pooled"][k] is None for k in ("lock_queue_workers", "delayed_claims", "stall_ms",
                                                        "ongoing_stall_ms"))
    assert seconds["pooled"]["lock_queue_row_exclusive"] == 3 and seconds["pooled"]["migration_blocking"] == 1
    record = {"ddl": "add_column", "statement": "ALTER TABLE", "lock_timeout_ms": 100, "retry_ms": 100,
              "timeout_set": "100ms", "start_s": 0, "attempts": [{"outcome": "done", "end_s": 0.5, "error": None}]}
    (figures,) = migrations({"migrations": [record], "pooler": {"pool_mode": "transaction"}},
                            [{"t_s": 0, "claims": 5, **seconds["pooled"]}])
    assert figures["workers_not_measured"] == BEHIND_POOLER and figures["delayed_claims"] is None
    (direct_figures,) = migrations({"migrations": [record], "pooler": None}, [{"t_s": 0, "claims": 5, **seconds["direct"]}])
    assert direct_figures["workers_not_measured"] is None and direct_figures["delayed_claims"] == 1
