"""``DSN_DIRECT`` checked before a run creates anything: the same server (``pg_control_system()``'s system
identifier, https://www.postgresql.org/docs/current/functions-info.html) and the same database
(``current_database()``) as ``DSN``, which a pooler may name differently. Raises ConfigError (``DSN_DIRECT``)."""

from __future__ import annotations

import psycopg

from bench.engines.postgres.adapter import connect_dsn
from bench.errors import ConfigError
from bench.usage import named

#: What DSN_DIRECT may be, said in each refusal (``{dsn}`` as the user types it).
ALLOWED = "allowed: {dsn}'s server and database reached without the pooler"

_READ = "SELECT (SELECT system_identifier FROM pg_control_system()), current_database()"


def check_direct(direct: psycopg.Connection, dsn: str) -> None:
    """Refuse ``direct`` (a connection to ``DSN_DIRECT``) unless ``dsn`` (through the pooler) reaches the same
    server and database; ``dsn`` is asked one statement, unnamed, on a connection of its own."""
    with connect_dsn(dsn, application_name="queue-bench pooler check", auto_prepare=False) as pooled:
        pooled_id, pooled_db = pooled.execute(_READ).fetchone()
    direct_id, direct_db = direct.execute(_READ).fetchone()
    if direct_id != pooled_id:
        raise ConfigError("DSN_DIRECT", named(f"reaches another server than {{dsn}}: its system identifier is "
                                              f"{direct_id}, the one {{dsn}} reaches {pooled_id}; {ALLOWED}"))
    if direct_db != pooled_db:
        raise ConfigError("DSN_DIRECT", named(f"reaches database {direct_db!r}, and {{dsn}} database {pooled_db!r} of "
                                              f"the same server; {ALLOWED}"))
