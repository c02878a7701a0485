"""The wait events of the run's client backends on PostgreSQL, for :class:`bench.engines.wait_events.WaitEventFold`:
every client backend of the run's database but the sampler's own, with its application name, state and wait event
(https://www.postgresql.org/docs/current/monitoring-stats.html#MONITORING-PG-STAT-ACTIVITY-VIEW). Which of them
count, and only when active, is decided in the fold, once for every engine."""

from __future__ import annotations

QUERY = """\
SELECT application_name, state, wait_event_type, wait_event FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"""
