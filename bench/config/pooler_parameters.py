"""The rows of the parameter table for a user's connection pooler in front of ``DSN`` (``POOL_MODE``,
``DSN_DIRECT``), their refusals, and the one decision every layer reads: whether the workers' sessions must keep
no state on the server (docs/poolers.md). Standard library only, as :mod:`bench.config.parameters`, which lists
them."""

from __future__ import annotations

from typing import Any

from bench.config import parsers
from bench.config.choices import POOL_MODES
from bench.config.parameter import NOT_APPLICABLE, Parameter
from bench.errors import ConfigError
from bench.usage import named, setting, switch

#: The pool mode whose sessions keep no state on the server: each transaction may run on another server
#: connection, so nothing set or prepared in one is there in the next.
STATELESS_MODE = "transaction"

#: What goes through the pooler (``DSN``) and what goes to ``DSN_DIRECT``, as run.json records it.
THROUGH_POOLER = ("workers", "producers", "reaper")
DIRECT = ("admin (preparation, the schema's advisory lock, plan capture, statistics)", "monitor", "audit",
          "archive mover", "VACUUM", "fault windows", "standby sampler")

_PG_ONLY = {"engine_values": {"mariadb": ()},
            "engine_reasons": {"mariadb": "not built: running behind a MariaDB proxy (ProxySQL, MaxScale) is "
                                          "not built"}}

_P = Parameter
POOLER_PARAMETERS: tuple[Parameter, ...] = (
    _P("pool_mode", "choice", "none", "none | transaction | session: the pool mode of the pooler DSN reaches",
       group="database", choices=POOL_MODES, **_PG_ONLY,
       meaning="the pool mode of a connection pooler `DSN` reaches (PgBouncer's `pool_mode`; the tool never "
               "changes a user's pooler): `transaction` makes the workers', producers' and reaper's sessions "
               "keep no state on the server (statements unnamed with bound parameters, so `PREPARED` is 0; "
               "`search_path` and a definition's `[settings]` set per transaction with `SET LOCAL`; no "
               "`LISTEN`, so no `WAKEUP=notify`); `session` changes nothing in the sessions. Either needs "
               "`DSN_DIRECT`, where the tool's own connections go (docs/poolers.md)"),
    _P("dsn_direct", "text", "", "the DSN's server reached directly, not through its pooler (with POOL_MODE)",
       group="database", parse_value=parsers.parse_dsn_direct, default_text="none", **_PG_ONLY,
       allowed="a `postgresql://` URL or libpq key=value DSN of `DSN`'s server and database, not through the pooler",
       meaning="where the tool's own connections go when `DSN` is a pooler: the admin connection (preparation, "
               "the schema's advisory lock, plan capture, statistics), the monitor, the audit, the archive mover, "
               "VACUUM and the fault windows; only the workers, producers and reaper go through `DSN`. Checked "
               "before anything is created to reach the same server (`pg_control_system()`'s system identifier) "
               "and database as `DSN`; masked in `run.json`"),
)


def stateless_sessions(pool_mode: str) -> bool:
    """True when sessions through a pooler in ``pool_mode`` must keep no state on the server (:data:`STATELESS_MODE`):
    the one decision the adapter, the sessions and the refusals read."""
    return pool_mode == STATELESS_MODE


def check_pooler(values: dict[str, Any], dsn: str | None, given: set[str]) -> list[str]:
    """Refuse (ConfigError) ``POOL_MODE`` or ``DSN_DIRECT`` without the other, without a DSN, or ``DSN_DIRECT``
    equal to it; behind a transaction pool, refuse what needs session state (``PREPARED=1``, ``WAKEUP=notify``,
    ``PLAN_CACHE``, a library's own workers) and set ``PREPARED`` 0 in ``values``. Returns the notes to print."""
    mode = values["pool_mode"]
    direct = values["dsn_direct"] if values["dsn_direct"] != NOT_APPLICABLE else ""
    if mode in ("none", NOT_APPLICABLE):
        if direct:
            raise ConfigError("DSN_DIRECT", "has no effect without a pooler: " + named(
                "allowed: {dsn_direct} with {pool_mode} transaction|session (DSN then names the pooler), or leave "
                "{dsn_direct} out"))
        return []
    if dsn is None:
        raise ConfigError("POOL_MODE", f"{mode} says " + named("{dsn} reaches a pooler, and there is no {dsn} (the "
                                       "embedded server has no pooler in front); allowed: {pool_mode} with {dsn} (the "
                                       "pooler) and {dsn_direct}, or leave {pool_mode} out"))
    if not direct:
        raise ConfigError("DSN_DIRECT", f"needed with {setting('pool_mode', mode)}: the tool's own connections (the schema's "
                                        "advisory lock, preparation, the monitor, the audit) must reach the server "
                                        "itself, or the lock stays on a pooled server connection; allowed: "
                                        f"{setting('dsn_direct', 'postgresql://...')} of "
                                        + named("{dsn}'s server and database"))
    if direct == dsn.strip():
        raise ConfigError("DSN_DIRECT", named("is {dsn} itself, the pooler; allowed: the same server and database "
                                              "reached without the pooler (its own host and port)"))
    return _check_stateless(values, given) if stateless_sessions(mode) else [
        f"{setting('pool_mode', mode)}: each client keeps one server connection for its life, so the sessions are "
        "as without a pooler (statements prepared by name, SET, LISTEN); " + named("the tool's own connections go "
                                                                                "to {dsn_direct}")]


def _check_stateless(values: dict[str, Any], given: set[str]) -> list[str]:
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
            "sent outside a transaction), no LISTEN; " + named("the tool's own connections go to {dsn_direct}")]


def pooler_record(cfg: Any) -> dict[str, Any] | None:
    """run.json's ``pooler``: the pool mode, whether the sessions kept state, what went through ``DSN`` and
    what to ``DSN_DIRECT``; None without a pooler."""
    if cfg.pool_mode in ("none", NOT_APPLICABLE):
        return None
    stateless = stateless_sessions(cfg.pool_mode)
    return {"pool_mode": cfg.pool_mode, "sessions": "stateless" if stateless else "as without a pooler",
            "prepared": cfg.prepared, "settings_applied": "per transaction (SET LOCAL)" if stateless else "per session (SET)",
            "extra_round_trips_per_autocommit_statement": 2 if stateless else 0,
            "through_pooler": list(THROUGH_POOLER), "direct": list(DIRECT)}
