"""The rows of the parameter table for a connection pooler in front of the database: a user's (``POOL_MODE``,
``DSN_DIRECT``) or the embedded PgBouncer the tool starts (``POOLER``, ``POOL_SIZE``, ``POOL_MODE``), their
refusals, and the one decision every layer reads: whether the workers' sessions must keep no state on the server
(docs/poolers.md). Standard library only, as :mod:`bench.config.parameters`, which lists them."""

from __future__ import annotations

from typing import Any

from bench.config import parsers
from bench.config.choices import MAX_POOL_SIZE, POOL_MODES, POOLERS
from bench.config.parameter import NOT_APPLICABLE, Parameter
from bench.errors import ConfigError
from bench.usage import named, option, setting, switch

#: The pool mode whose sessions keep no state on the server: each transaction may run on another server
#: connection, so nothing set or prepared in one is there in the next.
STATELESS_MODE = "transaction"

#: ``POOL_MODE`` of the embedded pooler when it is not given (``POOLER=pgbouncer``): PgBouncer's mode that shares
#: server connections between clients, the one a pooler is usually put in front of a queue for.
EMBEDDED_DEFAULT_MODE = STATELESS_MODE

#: What goes through the pooler (``DSN`` or the embedded one's) and what goes direct to the server
#: (``DSN_DIRECT``, or the server behind the embedded pooler), as run.json records it.
THROUGH_POOLER = ("workers", "producers", "reaper", "round-trip probe")
DIRECT = ("admin (preparation, the schema's advisory lock, plan capture, statistics)", "monitor", "audit",
          "archive mover", "VACUUM", "fault windows", "standby sampler")

_PG_ONLY = {"engine_values": {"mariadb": ()},
            "engine_reasons": {"mariadb": "not built: running behind a MariaDB proxy (ProxySQL, MaxScale) is "
                                          "not built"}}
#: ``POOLER``'s engine rule: PgBouncer speaks PostgreSQL's protocol only; MariaDB's poolers are not built.
_POOLER_PG = {"engine_values": {"mariadb": ("none",)},
              "engine_reasons": {"mariadb": "not built: MariaDB's poolers, ProxySQL and MaxScale, are on paper only, "
                                            "in docs/engines.md"}}

_P = Parameter
POOLER_PARAMETERS: tuple[Parameter, ...] = (
    _P("pooler", "choice", "none", "none | pgbouncer: a throwaway connection pooler in front of the database",
       group="database", choices=POOLERS, **_POOLER_PG,
       meaning="`pgbouncer` starts a throwaway PgBouncer (the machine's, Debian's package `pgbouncer`) for the run "
               "in front of the embedded server or `DSN`: on a free port of 127.0.0.1, in a temporary directory of "
               "its own, as the embedded servers' unprivileged user, removed however the run ends. The workers, "
               "producers and reaper connect through it; the tool's own connections go direct, as with "
               "`DSN_DIRECT` (docs/poolers.md). Its mode is `POOL_MODE` (`transaction` unless given). Refused "
               "with `DSN_DIRECT` (that names a pooler of yours). Not built on MariaDB"),
    _P("pool_size", "int", 20, "server connections in the embedded pooler's pool (its default_pool_size)",
       group="database", minimum=1, maximum=MAX_POOL_SIZE, sweep=True, **_PG_ONLY,
       allowed=f"1–{MAX_POOL_SIZE:,}, at most the server's free connections",
       meaning="the embedded pooler's `default_pool_size`: the most server connections it opens to the database "
               "(one database, one user: one pool). The server's connection budget behind it is this plus the "
               "tool's direct connections, whatever the number of workers (docs/poolers.md, \"Connections behind "
               "a pool\"). Refused above the server's free connections (`max_connections` less its reserved slots "
               "and those in use, read before the pooler starts), and without `POOLER=pgbouncer` or with "
               "`DSN_DIRECT` (the tool never sets a user's pool). A sweep axis: each run of a cell starts its own "
               "pooler with the cell's pool size"),
    _P("pool_mode", "choice", "none", "none | transaction | session: the pool mode of the pooler in front of the "
                                      "server", group="database", choices=POOL_MODES, **_PG_ONLY,
       default_text=f"`none`; `{EMBEDDED_DEFAULT_MODE}` with `POOLER=pgbouncer`",
       meaning="the pool mode of the connection pooler in front of the server (PgBouncer's `pool_mode`): the one "
               "`DSN` reaches (the tool never changes a user's pooler; needs `DSN_DIRECT`), or the one the embedded "
               "pooler runs in (`POOLER=pgbouncer`). `transaction` gives a client a server connection for one "
               "transaction at a time and makes the workers', producers' and reaper's sessions keep no state on "
               "the server (statements unnamed with bound parameters, so `PREPARED` is 0; `search_path` and a "
               "definition's `[settings]` set per transaction with `SET LOCAL`; no `LISTEN`, so no "
               "`WAKEUP=notify`); `session` gives it one for as long as it stays connected and changes nothing in "
               "the sessions (the embedded pooler then runs `DISCARD ALL` on a server connection when it comes "
               "back) (docs/poolers.md)"),
    _P("dsn_direct", "text", "", "the DSN's server reached directly, not through its pooler (with POOL_MODE)",
       group="database", parse_value=parsers.parse_dsn_direct, default_text="none", **_PG_ONLY,
       allowed="a `postgresql://` URL or libpq key=value DSN of `DSN`'s server and database, not through the pooler",
       meaning="where the tool's own connections go when `DSN` is a pooler: the admin connection (preparation, "
               "the schema's advisory lock, plan capture, statistics), the monitor, the audit, the archive mover, "
               "VACUUM and the fault windows; only the workers, producers and reaper go through `DSN`. Checked "
               "before anything is created to reach the same server (`pg_control_system()`'s system identifier) "
               "and database as `DSN`; masked in `run.json`"),
    _P("pooler_admin_dsn", "text", "", "your PgBouncer's admin console (database pgbouncer), read only",
       group="database", parse_value=parsers.parse_pooler_admin_dsn, default_text="none", **_PG_ONLY,
       allowed="a `postgresql://` URL or libpq key=value DSN of the admin console (database `pgbouncer`) of the "
               "PgBouncer `DSN` reaches, as one of its `admin_users` or `stats_users`; with `DSN_DIRECT`",
       meaning="the console of your pooler (`DSN_DIRECT` given): its mode, `default_pool_size`, `max_client_conn` "
               "and version are read with `SHOW CONFIG`/`SHOW VERSION` and recorded in `run.json`, and its pool is "
               "measured each second with `SHOW POOLS`/`SHOW STATS` (clients waiting, server connections, the mean "
               "wait per transaction; docs/poolers.md, \"Reading the pooler figures\"). Only `SHOW` commands are "
               "sent: the tool never sets a user's pool. Masked in `run.json`. The embedded pooler "
               "(`POOLER=pgbouncer`) is read through its own console without it"),
)


def users_console(cfg: Any) -> str | None:
    """``POOLER_ADMIN_DSN``: the console of a user's pooler, or None when not given."""
    return cfg.pooler_admin_dsn if cfg.pooler_admin_dsn not in ("", NOT_APPLICABLE) else None


def stateless_sessions(pool_mode: str) -> bool:
    """True when sessions through a pooler in ``pool_mode`` must keep no state on the server (:data:`STATELESS_MODE`):
    the one decision the adapter, the sessions and the refusals read."""
    return pool_mode == STATELESS_MODE


def embedded_pooler(values: dict[str, Any]) -> bool:
    """True when the run starts its own pooler (``POOLER`` other than none and n/a)."""
    return values["pooler"] not in ("none", NOT_APPLICABLE)


def check_pooler(values: dict[str, Any], dsn: str | None, given: set[str]) -> list[str]:
    """Refuse (ConfigError) ``POOL_MODE`` or ``DSN_DIRECT`` without the other, without a DSN, or ``DSN_DIRECT``
    equal to it; ``POOLER`` or ``POOL_SIZE`` with ``DSN_DIRECT``, ``POOL_SIZE`` without ``POOLER``; set the
    embedded pooler's ``POOL_MODE`` when not given (:data:`EMBEDDED_DEFAULT_MODE`); behind a transaction pool,
    refuse what needs session state (``PREPARED=1``, ``WAKEUP=notify``, ``PLAN_CACHE``, a library's own workers)
    and set ``PREPARED`` 0 in ``values``. Returns the notes to print."""
    direct = values["dsn_direct"] if values["dsn_direct"] != NOT_APPLICABLE else ""
    _check_admin_dsn(values, direct)
    if embedded_pooler(values):
        return _check_embedded(values, direct, given)
    if "pool_size" in given and direct:
        raise ConfigError("POOL_SIZE", named("sizes the pool of the pooler the tool starts, and {dsn_direct} says "
                                             "{dsn} is a pooler of yours, which keeps its own pool size; allowed: "
                                             "leave {pool_size} out, or ") + setting('pooler', 'pgbouncer')
                                       + named(" with {pool_size} and without {dsn_direct} ({dsn} the server)"))
    if "pool_size" in given:
        raise ConfigError("POOL_SIZE", "sizes the pool of the pooler the tool starts, and none is started (a "
                                       f"pooler of yours keeps its own pool size); allowed: {setting('pooler', 'pgbouncer')}"
                                       f" with {option('pool_size')}, or leave {option('pool_size')} out")
    mode = values["pool_mode"]
    if mode in ("none", NOT_APPLICABLE):
        if direct:
            raise ConfigError("DSN_DIRECT", "has no effect without a pooler: " + named(
                "allowed: {dsn_direct} with {pool_mode} transaction|session (DSN then names the pooler), or leave "
                "{dsn_direct} out"))
        return []
    if dsn is None:
        raise ConfigError("POOL_MODE", f"{mode} says " + named("{dsn} reaches a pooler, and there is no {dsn} (the "
                                       "embedded server has no pooler in front); allowed: {pool_mode} with {dsn} (the "
                                       "pooler) and {dsn_direct}, or with ") + setting("pooler", "pgbouncer")
                                       + named(", or leave {pool_mode} out"))
    if not direct:
        raise ConfigError("DSN_DIRECT", f"needed with {setting('pool_mode', mode)}: the tool's own connections (the schema's "
                                        "advisory lock, preparation, the monitor, the audit) must reach the server "
                                        "itself, or the lock stays on a pooled server connection; allowed: "
                                        f"{setting('dsn_direct', 'postgresql://...')} of "
                                        + named("{dsn}'s server and database"))
    if direct == dsn.strip():
        raise ConfigError("DSN_DIRECT", named("is {dsn} itself, the pooler; allowed: the same server and database "
                                              "reached without the pooler (its own host and port)"))
    return _mode_notes(values, given, option("dsn_direct"))


def _check_admin_dsn(values: dict[str, Any], direct: str) -> None:
    """Refuse (ConfigError ``POOLER_ADMIN_DSN``) a console DSN with the embedded pooler (read through its own
    console) or without a pooler of yours (``DSN_DIRECT``)."""
    if values["pooler_admin_dsn"] in ("", NOT_APPLICABLE):
        return
    if embedded_pooler(values):
        raise ConfigError("POOLER_ADMIN_DSN", f"names the console of a pooler of yours, and "
                                              f"{setting('pooler', values['pooler'])} starts one the tool reads "
                                              "through its own console; allowed: leave "
                                              + named("{pooler_admin_dsn} out, or give it with {dsn} (your pooler) "
                                                      "and {dsn_direct} instead of {pooler}"))
    if not direct:
        raise ConfigError("POOLER_ADMIN_DSN", "names the console of a pooler of yours, and " + named(
            "there is none ({dsn_direct} not given); allowed: {pooler_admin_dsn} with {dsn} (the pooler), "
            "{dsn_direct} and {pool_mode}, or leave {pooler_admin_dsn} out"))


def _check_embedded(values: dict[str, Any], direct: str, given: set[str]) -> list[str]:
    """:func:`check_pooler` with ``POOLER=pgbouncer``: refused with ``DSN_DIRECT`` or ``POOL_MODE`` none; the mode
    :data:`EMBEDDED_DEFAULT_MODE` when not given. The tool knows the server behind its pooler, so no
    ``DSN_DIRECT`` is needed."""
    if direct:
        raise ConfigError("POOLER", f"{values['pooler']} starts a pooler in front of " + named(
                                    "{dsn}'s server, and {dsn_direct} says {dsn} is a pooler of yours already; allowed: ")
                                    + f"{setting('pooler', values['pooler'])} without {option('dsn_direct')} ("
                                    + named("{dsn} the server), or {dsn_direct} without {pooler}"))
    if "pool_mode" not in given:
        values["pool_mode"] = EMBEDDED_DEFAULT_MODE
    if values["pool_mode"] == "none":
        raise ConfigError("POOL_MODE", f"none with {setting('pooler', values['pooler'])}, which runs in a "
                                       f"pool mode; allowed: {setting('pool_mode', 'transaction')} or "
                                       f"{setting('pool_mode', 'session')}, or leave {option('pool_mode')} out "
                                       f"({EMBEDDED_DEFAULT_MODE})")
    return _mode_notes(values, given, "the server behind the embedded pooler")


def _mode_notes(values: dict[str, Any], given: set[str], direct_words: str) -> list[str]:
    """The notes of a pool mode (the tool's own connections go to ``direct_words``), after the refusals of a
    transaction pool (:func:`_check_stateless`)."""
    if stateless_sessions(values["pool_mode"]):
        return _check_stateless(values, given, direct_words)
    return [f"{setting('pool_mode', 'session')}: each client keeps one server connection for its life, so the "
            "sessions are as without a pooler (statements prepared by name, SET, LISTEN); the tool's own connections "
            "go to " + direct_words]


def _check_stateless(values: dict[str, Any], given: set[str], direct_words: str) -> list[str]:
    """The refusals of :func:`check_pooler` behind a transaction pool, and ``PREPARED`` set to 0."""
    if values["library_mode"] == "worker":
        raise ConfigError("LIBRARY_MODE", "worker runs the library's own driver, whose session state (prepared "
                                          "statements, LISTEN) the tool cannot take away; allowed: "
                                          f"{setting('library_mode', 'sql')} with {setting('pool_mode', STATELESS_MODE)}")
    if values["prepared"] is True and "prepared" in given:
        raise ConfigError("PREPARED", "1 prepares the claim by name, and a transaction pool runs a client's next "
                                      "transaction on another server connection, where the name is missing or "
                                      f"another client's; allowed: {switch('prepared', False)} or leave it out "
                                      f"with {setting('pool_mode', STATELESS_MODE)}")
    if values["wakeup"] == "notify":
        raise ConfigError("WAKEUP", "notify LISTENs on the worker's session, and a transaction pool hands that "
                                    "server connection to other clients between transactions, so notifications "
                                    f"are lost; allowed: {setting('wakeup', 'poll')} with "
                                    f"{setting('pool_mode', STATELESS_MODE)}")
    if values["plan_cache"] not in ("auto", NOT_APPLICABLE) and "plan_cache" in given:
        raise ConfigError("PLAN_CACHE", f"{values['plan_cache']} applies to a claim prepared by name, and behind a "
                                        "transaction pool every statement is unnamed, planned with its values on "
                                        f"every execution; allowed: auto with {setting('pool_mode', STATELESS_MODE)}")
    values["prepared"], values["plan_cache"] = False, "auto"
    return [f"{setting('pool_mode', STATELESS_MODE)}: the workers', producers' and reaper's sessions keep no state "
            f"on the server: every statement unnamed with bound parameters ({switch('prepared', False)}), search_path "
            "and settings set per transaction with SET LOCAL (one more round trip before and one after a statement "
            "sent outside a transaction), no LISTEN; the tool's own connections go to " + direct_words]


def check_session_pool(cfg: Any) -> None:
    """Refuse (ConfigError, ``POOL_SIZE``) an embedded session pool smaller than the connections the run opens
    through it (``cfg.pooled_connections()``): a session keeps its server connection until it disconnects, so
    the clients past the pool would wait for ever and the run would start short."""
    clients = cfg.pooled_connections()
    if cfg.pooler in ("none", NOT_APPLICABLE) or cfg.pool_mode != "session" or cfg.pool_size >= clients:
        return
    raise ConfigError("POOL_SIZE", f"{cfg.pool_size} in session mode, where each client keeps its server connection "
                                   f"while connected, and the run opens {clients} through the pooler (workers, "
                                   f"reaper, producers, the round-trip probe); allowed: {setting('pool_size', clients)} or more with "
                                   f"{setting('pool_mode', 'session')}, or {setting('pool_mode', 'transaction')}")


def pooler_record(cfg: Any) -> dict[str, Any] | None:
    """run.json's ``pooler``: whose it is (``embedded``: the tool's ``POOLER``, with its ``pool_size``), the pool
    mode, whether the sessions kept state, what went through the pooler and what direct; None without one."""
    if cfg.pool_mode in ("none", NOT_APPLICABLE):
        return None
    stateless = stateless_sessions(cfg.pool_mode)
    embedded = cfg.pooler not in ("none", NOT_APPLICABLE)
    return {"embedded": cfg.pooler if embedded else None, "pool_size": cfg.pool_size if embedded else None,
            "pool_mode": cfg.pool_mode, "sessions": "stateless" if stateless else "as without a pooler",
            "prepared": cfg.prepared, "settings_applied": "per transaction (SET LOCAL)" if stateless else "per session (SET)",
            "extra_round_trips_per_autocommit_statement": 2 if stateless else 0,
            "through_pooler": list(THROUGH_POOLER), "direct": list(DIRECT)}
