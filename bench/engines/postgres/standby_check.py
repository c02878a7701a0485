"""``DSN_REPLICA`` checked before a run creates anything: reachable, a hot standby, and a standby of the DSN's
own server (the same system identifier). Raises ConfigError (``DSN_REPLICA``). Sources:
https://www.postgresql.org/docs/current/functions-admin.html (``pg_is_in_recovery``),
https://www.postgresql.org/docs/current/functions-info.html (``pg_control_system``)."""

from __future__ import annotations

import psycopg

from bench.engines.postgres.adapter import connect_dsn
from bench.errors import ConfigError

#: What DSN_REPLICA may be, said in each refusal.
ALLOWED = "allowed: a hot standby of the DSN's server (pg_is_in_recovery() true, the same system identifier)"

_READ = "SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())"


def check_given_standby(primary: psycopg.Connection, dsn_replica: str) -> None:
    """Refuse ``dsn_replica`` unless it connects, is in recovery and has ``primary``'s system identifier."""
    standby = connect_dsn(dsn_replica, param="DSN_REPLICA", application_name="queue-bench standby check")
    with standby:
        in_recovery, standby_id = standby.execute(_READ).fetchone()
    if not in_recovery:
        raise ConfigError("DSN_REPLICA", f"is not a standby: pg_is_in_recovery() is false on it (a primary, "
                                         f"perhaps the DSN's own server); {ALLOWED}")
    primary_id = primary.execute(_READ).fetchone()[1]
    if standby_id != primary_id:
        raise ConfigError("DSN_REPLICA", f"is a standby of another server: its system identifier is {standby_id}, "
                                         f"the DSN's server's {primary_id}; {ALLOWED}")
