"""Where a PostgreSQL connection string points: is it this machine? Parses, never connects."""

from __future__ import annotations

import os

from bench.engines.common import is_loopback_host
from bench.errors import ConfigError
from bench.usage import option


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


def relay_target(dsn: str, key: str = "NET_DELAY_MS") -> tuple[str, int]:
    """The (host, port) ``dsn`` connects to over TCP, for a delay relay in front of it: ``hostaddr`` else ``host``
    (else ``PGHOSTADDR`` / ``PGHOST``), ``port`` (else ``PGPORT``, 5432). Raises ConfigError (``key``: the relay's
    parameter that was given) for a
    Unix socket, several hosts or a service file, which the relay cannot stand in front of; (``DSN``) when unparsable."""
    from bench.engines.postgres.adapter import ConnectFailed, conninfo_params  # here: see non_loopback_host

    try:
        params = conninfo_params(dsn)
    except ConnectFailed as err:
        raise ConfigError("DSN", f"{err}; e.g. postgresql://postgres@127.0.0.1:5432/postgres") from None
    host = str(params.get("hostaddr") or os.environ.get("PGHOSTADDR") or params.get("host")
               or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or "5432")
    why = ("names a libpq service" if params.get("service") or os.environ.get("PGSERVICE") else
           "reaches the server over a Unix socket" if not host or host.startswith(("/", "@")) else
           "names several hosts" if "," in host or "," in port else "")
    if why or not port.isdigit():
        raise ConfigError(key, f"the DSN {why or 'has a port that is not a number'}, and the delay relay forwards one "
                               "TCP host and port; allowed: a DSN with one host and port "
                               f"(e.g. postgresql://postgres@127.0.0.1:5432/postgres), or no {option(key.lower())}")
    return host, int(port)


def through(dsn: str, host: str, port: int) -> str:
    """``dsn`` pointed at ``host``:``port`` (a delay relay), every other keyword kept."""
    from bench.engines.postgres.adapter import conninfo_params, make_conninfo  # here: see non_loopback_host

    params = {key: value for key, value in conninfo_params(dsn).items() if key != "hostaddr"}
    return make_conninfo(**{**params, "host": host, "port": str(port)})


def with_liveness(dsn: str, liveness: dict | None) -> str:
    """``dsn`` with libpq's TCP liveness keywords for ``liveness``
    (:func:`bench.config.network_parameters.tcp_liveness`: ``keepalives``, ``keepalives_idle``,
    ``keepalives_interval``, ``keepalives_count``, ``tcp_user_timeout``:
    https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-KEEPALIVES), every other keyword kept; ``dsn``
    as it is for None."""
    if liveness is None:
        return dsn
    from bench.engines.postgres.adapter import conninfo_params, make_conninfo  # here: see non_loopback_host

    return make_conninfo(**{**conninfo_params(dsn), "keepalives": "1",
                            "keepalives_idle": str(liveness["keepalives_idle_s"]),
                            "keepalives_interval": str(liveness["keepalives_interval_s"]),
                            "keepalives_count": str(liveness["keepalives_count"]),
                            "tcp_user_timeout": str(liveness["tcp_user_timeout_ms"])})
