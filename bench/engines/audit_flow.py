"""The end-of-run audit's one flow (docs/architecture.md, "The audit"), each engine giving its SQL and its
driver's steps (:class:`AuditSteps`); importing no driver."""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any

from bench.config.choices import EFFECTS_WRITTEN
from bench.engines.common import CLAIM_CHECKS, audit_result
from bench.workload.jobs import poison_sql

#: Over the applied completions (``{applied}``: per completion ``n_rows``, ``is_current``, ``is_done``):
#: completions applied, stale ones applied, jobs completed more than once.
COMPLETION_CHECKS = """\
SELECT COUNT(*), COALESCE(SUM(CASE WHEN n_rows > 0 AND NOT is_current THEN 1 ELSE 0 END), 0),
       (SELECT COUNT(*) FROM (SELECT id FROM {applied} GROUP BY id HAVING COUNT(*) > 1) AS twice)
FROM {applied}"""

# Claim times (database epoch s) of each job that failed at least once, from the failed
# attempt's claim (when it was the job's latest claim at the failure) onwards, in log order;
# jobs in the order of their first failure (rows of (first failure's seq, claimed_at)).
RETRY_CLAIMS = """\
WITH rc_first_fail AS (
    SELECT id, seq, token
    FROM (SELECT id, seq, token, ROW_NUMBER() OVER (PARTITION BY id ORDER BY seq) AS n
          FROM {events} WHERE kind = 'f') AS f
    WHERE n = 1
), rc_claims AS (
    SELECT c.id, c.seq, c.token, c.claimed_at FROM {events} c JOIN rc_first_fail f ON f.id = c.id WHERE c.kind = 'c'
), rc_last_before AS (
    SELECT id, seq, token
    FROM (SELECT c.id, c.seq, c.token, ROW_NUMBER() OVER (PARTITION BY c.id ORDER BY c.seq DESC) AS n
          FROM rc_claims c JOIN rc_first_fail f ON f.id = c.id AND c.seq < f.seq) AS l
    WHERE n = 1
), rc_start AS (
    SELECT f.id, f.seq AS fail_seq, CASE WHEN l.token = f.token THEN l.seq ELSE f.seq END AS from_seq
    FROM rc_first_fail f LEFT JOIN rc_last_before l ON l.id = f.id
)
SELECT s.fail_seq, c.claimed_at
FROM rc_start s JOIN rc_claims c ON c.id = s.id AND c.seq >= s.from_seq
ORDER BY s.fail_seq, c.seq"""

_POISON = """\
SELECT COUNT(*), COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0),
       COALESCE(SUM(CASE WHEN status = 'dead' THEN 1 ELSE 0 END), 0),
       MIN(CASE WHEN status = 'dead' THEN attempts END), MAX(CASE WHEN status = 'dead' THEN attempts END)
FROM {jobs} WHERE """

#: ``EFFECTS`` (docs/effects.md), over the ``{effects}`` table, the applied completions and the queue's rows
#: (``{effect_rows}``: ``id``, ``token``, ``done``): effect rows, logical
#: jobs with one, jobs with more than one, jobs a run completed with none, effects whose attempt token is not
#: the one that completed the job.
EFFECT_CHECKS = """\
SELECT (SELECT COUNT(*) FROM {effects}), (SELECT COUNT(DISTINCT logical_id) FROM {effects}),
       (SELECT COUNT(*) FROM (SELECT logical_id FROM {effects} GROUP BY logical_id HAVING COUNT(*) > 1) AS twice),
       (SELECT COUNT(DISTINCT a.id) FROM {applied} a
        WHERE a.is_done AND NOT EXISTS (SELECT 1 FROM {effects} e WHERE e.logical_id = a.id)),
       (SELECT COUNT(*) FROM {effects} e JOIN {effect_rows} j ON j.id = e.logical_id
        WHERE j.done AND e.attempt_token <> j.token)"""

#: What a queue definition's audit reports in place of the built-in table's figures.
NO_BUILTIN_FIGURES = {"fifo_compared": 0, "fifo_out_of_order": 0, "retry_gaps": None, "poison": {}}


class AuditSteps:
    """An engine's part of the audit over ``names`` (what fills the templates' ``{…}``: ``events``,
    ``claims``, ``applied``, ``jobs``, ``rows``, …): its statements and what its driver does its own way."""

    driver: Any = None
    #: ``CREATE`` of the claims table (per claimed job ``claims``, ``overlapping``) and the applied table
    create_claims = create_applied = ""
    #: one row: (compared jobs, jobs started out of claim order)
    fifo = ""

    def __init__(self, names: dict):
        self.names = names

    def sql(self, template: str) -> Any:
        """``template`` with :attr:`names` filled in, as the driver takes it."""
        return template.format(**self.names)

    def begin(self, conn) -> None:
        """Open the audit's transaction."""
        self.driver.execute(conn, "START TRANSACTION")

    def load_events(self, conn, log) -> int:  # pragma: no cover - abstract
        """The claim log's events in the ``{events}`` table; returns how many."""
        raise NotImplementedError

    def status_counts(self, conn) -> dict[str, int]:
        """``{status: rows}`` of the built-in table."""
        rows = self.driver.fetch(conn, self.sql("SELECT status, COUNT(*) FROM {jobs} GROUP BY status"), None, True)
        return {str(status): int(n) for status, n in rows}

    def row_checks(self, conn) -> dict[str, int]:  # pragma: no cover - abstract
        """``expected``, ``missing``, ``not_durable``, ``lost``, ``duplicated``."""
        raise NotImplementedError

    def cleanup(self, conn) -> None:
        """Drop what the audit left beyond its transaction (nothing by default)."""

    def row(self, conn, template: str, keys: str) -> dict[str, int]:
        """The one row of ``template`` as ints, named by ``keys`` (space-separated)."""
        return dict(zip(keys.split(), map(int, self.driver.fetch(conn, self.sql(template), None, False))))


def run_audit(steps: AuditSteps, conn, log, *, builtin: bool, over_claims: int, poison_share: float,
              effects: str = "none") -> dict:
    """:func:`bench.engines.common.audit_result` of ``log``'s events in one transaction (rolled back and
    :meth:`AuditSteps.cleanup` on any error, the first error raised), with ``effects`` (:func:`effect_counts`)
    under ``EFFECTS`` ``effects``. Raises the driver's errors."""
    execute = steps.driver.execute
    steps.begin(conn)
    try:
        events = steps.load_events(conn, log)
        status = steps.status_counts(conn)
        execute(conn, steps.sql(steps.create_claims))
        counts = steps.row(conn, CLAIM_CHECKS.replace("{jobs}", "{rows}"),
                           "claimed_distinct claimed_more_than_once redeliveries overlapping attempts_short "
                           "double_claims")
        execute(conn, steps.sql(steps.create_applied))
        counts |= steps.row(conn, COMPLETION_CHECKS, "applied stale_applied double_completions")
        counts |= steps.row_checks(conn)
        figures = _builtin_figures(steps, conn, poison_share) if builtin else NO_BUILTIN_FIGURES
        effect_figures = effect_counts(steps, conn, effects, counts["redeliveries"])
        execute(conn, "COMMIT")
    except BaseException:
        # a gone connection took its temporary tables with it; the first error is the one to see
        with contextlib.suppress(*steps.driver.errors, OSError):
            execute(conn, "ROLLBACK")
            steps.cleanup(conn)
        raise
    steps.cleanup(conn)
    return {**audit_result(status_counts=status, **counts, over_claims=over_claims, events=events, **figures),
            "effects": effect_figures}


def per_1000(duplicates: int, redeliveries: int) -> float | None:
    """``duplicates`` per 1,000 ``redeliveries`` (None with no redelivery)."""
    return round(1000.0 * duplicates / redeliveries, 3) if redeliveries else None


def effect_counts(steps: AuditSteps, conn, mode: str, redeliveries: int) -> dict | None:
    """The effect rows' audit under ``EFFECTS`` ``mode`` (None for ``none``): ``written``, ``jobs_with_effect``,
    ``duplicate_jobs`` (logical jobs with more than one), ``extra_effects`` (rows beyond one a job),
    ``missing_effects`` (jobs completed with none), ``stale_attempt_effects`` (token not the completing one),
    ``duplicates_per_1000_redeliveries`` (None with no redelivery)."""
    if mode not in EFFECTS_WRITTEN:
        return None
    out = {"mode": mode, **steps.row(conn, EFFECT_CHECKS, "written jobs_with_effect duplicate_jobs missing_effects "
                                                          "stale_attempt_effects")}
    out["extra_effects"] = out["written"] - out["jobs_with_effect"]
    out["redeliveries"] = redeliveries
    out["duplicates_per_1000_redeliveries"] = per_1000(out["duplicate_jobs"], redeliveries)
    return out


def _builtin_figures(steps: AuditSteps, conn, poison_share: float) -> dict:
    """The built-in table's FIFO order, retry gaps and poison jobs (``{}`` when ``poison_share`` is 0)."""
    figures = steps.row(conn, steps.fifo, "fifo_compared fifo_out_of_order")
    figures["retry_gaps"] = None
    if steps.driver.fetch(conn, steps.sql("SELECT EXISTS (SELECT 1 FROM {events} WHERE kind = 'f')"), None, False)[0]:
        figures["retry_gaps"] = []
        rows = steps.driver.fetch(conn, steps.sql(RETRY_CLAIMS), None, True)
        for _, claims in itertools.groupby(rows, key=lambda r: r[0]):
            times = [float(r[1]) for r in claims]
            if len(times) > 1:
                figures["retry_gaps"].append([round(b - a, 6) for a, b in zip(times, times[1:])])
    figures["poison"] = {}
    if poison_share > 0:
        row = steps.driver.fetch(conn, steps.sql(_POISON + poison_sql(float(poison_share))), None, False)
        figures["poison"] = {"poison_jobs": int(row[0]), "poison_done": int(row[1]), "poison_dead": int(row[2]),
                             "poison_dead_attempts_min": None if row[3] is None else int(row[3]),
                             "poison_dead_attempts_max": None if row[4] is None else int(row[4])}
    return figures


def completed_per_queue(driver, conn, now_sql: str, count_sql: Any, names: list[str],
                        window: tuple[float, float], *, digits: int | None = None) -> dict[str, int]:
    """``{name: jobs done}`` from ``count_sql`` (rows ``(queue, count)``, the window's two bounds as parameters,
    server epoch s, rounded to ``digits``), 0 for none. The ``window`` (client epoch s) is moved to the server's
    clock by the offset read here (``now_sql`` against the middle of the round trip)."""
    before = time.time()
    server_now = float(driver.fetch(conn, now_sql, None, False)[0])
    offset = server_now - (before + time.time()) / 2
    bounds = tuple(t + offset if digits is None else round(t + offset, digits) for t in window)
    counts = {str(name): int(n) for name, n in driver.fetch(conn, count_sql, bounds, True)}
    return {name: counts.get(name, 0) for name in names}
