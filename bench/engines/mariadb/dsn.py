"""``mysql://user:password@host:port/database?options`` (or ``mariadb://``) parsed into PyMySQL's connect
arguments, never connected; the database part is only the connection's default and may be left out."""

from __future__ import annotations

import urllib.parse

from bench.engines.common import is_loopback_host
from bench.errors import ConfigError
from bench.usage import option

#: DSN schemes that mean this engine.
SCHEMES = ("mysql", "mariadb")
#: Query options a DSN may carry, with the connect argument each sets.
_OPTIONS = {"unix_socket": "unix_socket", "connect_timeout": "connect_timeout"}
#: Query options of TCP liveness (:func:`with_liveness`), whole numbers >= 1, applied to the socket once connected
#: (:func:`bench.engines.mariadb.adapter.connection.open_connection`), not connect arguments: ``connect_args``
#: gives them under ``liveness``.
LIVENESS_OPTIONS = ("tcp_user_timeout_ms", "keepalives_idle_s", "keepalives_interval_s", "keepalives_count")
_EXAMPLE = "e.g. mysql://root@127.0.0.1:3306/"


def connect_args(dsn: str) -> dict:
    """PyMySQL's ``connect`` arguments for ``dsn``: ``host``, ``port`` (3306), ``user`` (``root``),
    ``password``, ``database`` (None), options ``unix_socket``, ``connect_timeout`` (s); ``liveness``
    (:data:`LIVENESS_OPTIONS` given, for the socket, not PyMySQL). Raises ConfigError (``DSN``)."""
    parts = urllib.parse.urlsplit(dsn.strip())
    if parts.scheme not in SCHEMES:
        raise ConfigError("DSN", f"not a MariaDB connection string (scheme {parts.scheme or 'missing'!r}); "
                                 f"allowed: mysql:// or mariadb://, {_EXAMPLE}")
    try:
        port = parts.port or 3306
    except ValueError:
        raise ConfigError("DSN", f"the port is not a number; allowed: {_EXAMPLE}") from None
    args = {"host": parts.hostname or "127.0.0.1", "port": port,
            "user": urllib.parse.unquote(parts.username or "root"),
            "password": urllib.parse.unquote(parts.password or ""),
            "database": urllib.parse.unquote(parts.path.lstrip("/")) or None}
    for key, values in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items():
        if key not in _OPTIONS and key not in LIVENESS_OPTIONS:
            raise ConfigError("DSN", f"unknown option {key!r}; allowed: {', '.join((*_OPTIONS, *LIVENESS_OPTIONS))}")
        value = values[-1]
        if key in LIVENESS_OPTIONS:
            if not value.isdigit() or int(value) < 1:
                raise ConfigError("DSN", f"{key} {value!r}; allowed: a whole number >= 1")
            args.setdefault("liveness", {})[key] = int(value)
            continue
        if key == "connect_timeout":
            if not value.isdigit() or int(value) < 1:
                raise ConfigError("DSN", f"connect_timeout {value!r}; allowed: a whole number of seconds >= 1")
            value = int(value)
        args[_OPTIONS[key]] = value
    return args


def non_loopback_host(dsn: str) -> str | None:
    """The host ``dsn`` connects to when it is not this machine, else None. Raises ConfigError (``DSN``)."""
    args = connect_args(dsn)
    return None if args.get("unix_socket") or is_loopback_host(args["host"]) else args["host"]


def relay_target(dsn: str, key: str = "NET_DELAY_MS") -> tuple[str, int]:
    """The (host, port) ``dsn`` connects to, for a delay relay in front of it. Raises ConfigError (``key``: the relay's parameter that was given)
    for a Unix socket, which the relay cannot stand in front of; (``DSN``) when unparsable."""
    args = connect_args(dsn)
    if args.get("unix_socket"):
        raise ConfigError(key, "the DSN reaches the server over a Unix socket, and the delay relay forwards one TCP host "
                               f"and port; allowed: a DSN with a host and port ({_EXAMPLE}), or no {option(key.lower())}")
    return args["host"], args["port"]


def through(dsn: str, host: str, port: int) -> str:
    """``dsn`` pointed at ``host``:``port`` (a delay relay), its user, password, database and options kept."""
    parts = urllib.parse.urlsplit(dsn.strip())
    credentials = parts.netloc.rpartition("@")[0]
    netloc = (credentials + "@" if credentials else "") + f"{host}:{port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def with_liveness(dsn: str, liveness: dict | None) -> str:
    """``dsn`` with :data:`LIVENESS_OPTIONS` for ``liveness`` (:func:`bench.config.network_parameters.tcp_liveness`),
    applied to each connection's socket once connected; ``dsn`` as it is for None."""
    if liveness is None:
        return dsn
    parts = urllib.parse.urlsplit(dsn.strip())
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k not in liveness]
    query += [(key, str(liveness[key])) for key in LIVENESS_OPTIONS]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
