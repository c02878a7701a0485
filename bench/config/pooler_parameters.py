"""The rows of the parameter table for a connection pooler in front of the database: ``POOLER`` (the embedded
PgBouncer), ``POOL_SIZE`` and ``POOL_MODE`` (docs/poolers.md). Standard library only, as
:mod:`bench.config.parameters`, which lists them."""

from __future__ import annotations

from typing import Any

from bench.config.choices import MAX_POOL_SIZE, POOL_MODES, POOLERS
from bench.config.parameter import NOT_APPLICABLE, Parameter
from bench.errors import ConfigError
from bench.usage import named, option, setting

#: Their engine rule: PgBouncer speaks PostgreSQL's protocol only; MariaDB's poolers are not built.
_POOLER_PG = {"engine_values": {"mariadb": ("none",)},
              "engine_reasons": {"mariadb": "not built: MariaDB's poolers, ProxySQL and MaxScale, are on paper only, "
                                            "in docs/engines.md"}}
_POOLER_PG_ONLY = {"engine_values": {"mariadb": ()},
                   "engine_reasons": {"mariadb": "the embedded pooler is built for PostgreSQL only"}}

_P = Parameter
POOLER_PARAMETERS: tuple[Parameter, ...] = (
    _P("pooler", "choice", "none", "none | pgbouncer: a throwaway connection pooler in front of the database",
       group="database", choices=POOLERS, **_POOLER_PG,
       meaning="`pgbouncer` starts a throwaway PgBouncer (the machine's, Debian's package `pgbouncer`) for the run "
               "in front of the embedded server or `DSN`: on a free port of 127.0.0.1, in a temporary directory of "
               "its own, as the embedded servers' unprivileged user, removed however the run ends. The workers, "
               "producers and reaper connect through it; the admin connection, the monitor and the audit go "
               "direct (docs/poolers.md). Not built on MariaDB"),
    _P("pool_size", "int", 20, "server connections in the embedded pooler's pool (its default_pool_size)",
       group="database", minimum=1, maximum=MAX_POOL_SIZE, **_POOLER_PG_ONLY,
       allowed=f"1–{MAX_POOL_SIZE:,}, at most the server's free connections",
       meaning="the embedded pooler's `default_pool_size`: the most server connections it opens to the database "
               "(one database, one user: one pool). Refused above the server's free connections (`max_connections` "
               "less its reserved slots and those in use, read before the pooler starts), and without "
               "`POOLER=pgbouncer` (the tool never sets a user's pool)"),
    _P("pool_mode", "choice", "transaction", "transaction | session: when the pooler returns a server connection "
                                              "to its pool", group="database", choices=POOL_MODES, **_POOLER_PG_ONLY,
       default_text="`transaction`",
       meaning="the embedded pooler's `pool_mode`: `transaction` gives a client a server connection for one "
               "transaction at a time, `session` for as long as the client stays connected (PgBouncer then runs "
               "`DISCARD ALL` on it when it comes back). Refused without a pooler"),
)


def check_pooler(values: dict[str, Any], dsn: str | None, given: set[str]) -> None:
    """Refuse (ConfigError) ``POOL_SIZE`` without ``POOLER`` (the tool sets only its own pool), and ``POOL_MODE``
    without ``POOLER`` and without a DSN (a user's pooler, whose mode it declares)."""
    if values["pooler"] not in ("none", NOT_APPLICABLE):
        return
    if "pool_size" in given:
        raise ConfigError("POOL_SIZE", "sizes the pool of the pooler the tool starts, and none is started (a "
                                       f"pooler of yours keeps its own pool size); allowed: {setting('pooler', 'pgbouncer')}"
                                       f" with {option('pool_size')}, or leave {option('pool_size')} out")
    if "pool_mode" in given and dsn is None:
        raise ConfigError("POOL_MODE", "has no effect without a pooler: with no DSN the workers reach the embedded "
                                       + named("server direct; allowed: {pool_mode} with ") + setting("pooler", "pgbouncer")
                                       + named(" or with {dsn} of your pooler, or leave {pool_mode} out"))


def check_session_pool(cfg: Any) -> None:
    """Refuse (ConfigError, ``POOL_SIZE``) an embedded session pool smaller than the connections the run opens
    through it (``cfg.pooled_connections()``): a session keeps its server connection until it disconnects, so
    the clients past the pool would wait for ever and the run would start short."""
    clients = cfg.pooled_connections()
    if cfg.pooler == "none" or cfg.pool_mode != "session" or cfg.pool_size >= clients:
        return
    raise ConfigError("POOL_SIZE", f"{cfg.pool_size} in session mode, where each client keeps its server connection "
                                   f"while connected, and the run opens {clients} through the pooler (workers, "
                                   f"reaper, producers); allowed: {setting('pool_size', clients)} or more with "
                                   f"{setting('pool_mode', 'session')}, or {setting('pool_mode', 'transaction')}")
