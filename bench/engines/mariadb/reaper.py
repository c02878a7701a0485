"""The reaper on MariaDB: every ``reaper_interval_s``, one short transaction on its own connection takes back
jobs whose lease expired (``SKIP LOCKED``; re-checked, FR-06)."""

from __future__ import annotations


from bench.engines.mariadb import policies
from bench.engines.mariadb.adapter import DRIVER, results
from bench.engines.common import Periodic
from bench.measure.metrics import Recorder


class Reaper(Periodic):
    """Re-queues expired leases every ``interval_s`` s until :meth:`stop`, counted in ``recorder``."""

    driver = DRIVER

    def __init__(self, conn, schema: str, interval_s: float, recorder: Recorder):
        super().__init__(conn, interval_s, recorder)
        self.schema = schema

    def once(self) -> tuple[int, int]:
        """One pass; returns (jobs re-queued, jobs dead-lettered)."""
        with self.conn.cursor() as cur:
            ids = [int(r[0]) for r in results(cur, "START TRANSACTION;" + policies.reap_select(self.schema))[1][1]]
            rows = ()
            if ids:
                rows = results(cur, policies.reap_update(self.schema, ids) + ";"
                               + policies.reaped(self.schema, ids) + ";COMMIT")[1][1]
            else:
                results(cur, "COMMIT")
        return self.count_pass(rows)
