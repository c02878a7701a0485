"""Where a PostgreSQL connection string points: is it this machine? Parses, never connects."""

from __future__ import annotations

import os

from bench.engines.common import is_loopback_host
from bench.errors import ConfigError


def non_loopback_host(dsn: str) -> str | None:
    """The first host ``dsn`` would connect to that is not loopback, or None: ``hostaddr``, else ``host``, else
    ``PGHOSTADDR`` / ``PGHOST`` (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS).
    Raises ConfigError (``DSN``)."""
    # imported here: bench.cli.main imports this module before its entry point patches gevent, which must
    # precede psycopg's import (bench.gevent_patch); and --help needs no driver
    from bench.engines.postgres.adapter import ConnectFailed, conninfo_params

    try:
        params = conninfo_params(dsn)
    except ConnectFailed as err:
        raise ConfigError("DSN", f"{err}; e.g. postgresql://postgres@127.0.0.1:5432/postgres") from None
    service = params.get("service") or os.environ.get("PGSERVICE")
    if service:
        return f"service {service} (its host is in a libpq service file this tool does not read)"
    targets = str(params.get("hostaddr") or os.environ.get("PGHOSTADDR") or "")
    if not targets.strip():
        targets = str(params.get("host") or os.environ.get("PGHOST") or "")
    for host in targets.split(","):
        if not is_loopback_host(host):
            return host.strip()
    return None
